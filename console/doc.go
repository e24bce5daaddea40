// Package console is the operator console of a leasework events table: a
// web UI, as an [http.Handler] the application mounts under its own router
// and middleware (so its authentication applies), or that
// "leasework ui" serves.
//
//	c, err := console.New(store, console.Options{})
//	if err != nil { ... }
//	mux.Handle("/leasework/", http.StripPrefix("/leasework", c))
//
// # Pages
//
//   - the overview ("/"): events per status; rows eligible now, the oldest
//     eligible age, expired claims, held keys and paused queues; a chart of
//     the events finished DONE and FAILED per minute over the last hour,
//     drawn as SVG by the server; events per queue, kind and status;
//   - the events ("/events"): filtered by status, kind, queue and
//     partition, paged in id order ("after");
//   - an event ("/events/{id}"): every field of its row (event id, kind,
//     queue, priority, key, partition, cost under rate limits, status,
//     generation, attempt of the budget, worker, lease deadline, next
//     attempt, times, last error) and a
//     preview of its payload and progress: the first [PreviewBytes], as
//     text when they are UTF-8 text, otherwise in hex, saying when they are
//     cut; the steps its handler recorded (framework.Step), in the order
//     recorded, each with its name, the generation that recorded it,
//     when, its size and the first [StepPreviewBytes] of its value,
//     previewed the same way (the first [StepsShown] steps), and its
//     output, previewed as the payload; and, for a READY, WAITING or
//     INPROGRESS event, why it is not running
//     ([lease.Store.WhyNotRunning]: each reason's sentence, with a
//     link to its key's head or to the queues; an event set aside by its
//     partition's limit says so, one held by a rate limit says when
//     the next start is allowed, and one whose partition waits its turn
//     in a fair queue says how far ahead the partition is), or, when
//     nothing holds it back, what takes it;
//   - the queues ("/queues"), paused or running, with their rows per status;
//     then the concurrency limits ([lease.Store.Limits]), each with the
//     attempts live under it of its maximum ("kind send-email 3/5 live"),
//     the due events it holds back while full ([lease.LimitInfo].HeldBack,
//     a link to its READY events), when and by whom it was set, and the latest changes of the limits
//     ([lease.Store.LimitChanges]); a queue's own limit is shown in its
//     row too. A partition's limit shows the events it set aside
//     (WAITING, linked to them); the default limit of the partitions
//     ("partition default 7 live, 5 each") the live attempts of every
//     partition under it, the most each may have, and their events set
//     aside. Then the rate limits ([lease.Store.RateLimits]), each with
//     its starts in the window that ends now of its maximum ("kind
//     sms.send 37/100 starts per 1m0s"), and, while it is full, when the
//     next start is allowed; a partition's with its events set aside
//     ([lease.RateLimitInfo].HeldBack, linked to them), the default rate
//     limit of the partitions as "partition default 12 recent, 5 each
//     per 1m0s" (the starts of every partition under it, the most of
//     each); a queue's own rate limit is shown in its row too, and the
//     rate limits' changes among the latest changes. Then
//     the fair queues' weights ([lease.Store.Weights]): each queue's
//     default, with the partitions fair scheduling serves now, and each
//     partition's own weight, served or not, linked to their READY
//     events; then the queues' priority agings ([lease.Store.Agings]);
//     a queue's row says when it is fair, with its partitions served,
//     and its aging, and the changes table gives a weight's partition
//     and an aging's wait;
//   - the held keys ("/keys"): keys whose head event FAILED, with the
//     events waiting behind each.
//
// Bad input (an unknown status, an id that is not a number) gets a 400
// page, an event that does not exist a 404 page, and a failed statement a
// 500 page that says what failed; the statement's error goes to
// [Options.Logger], never to the page. The overview and the lists scan the
// table (see [lease.Store.Stats] and [lease.Store.Counts]): they are for
// people, not for monitoring scrapers.
//
// # Actions
//
// With [Options.Actions] set, the pages show forms that requeue a FAILED
// event ([lease.Store.Requeue]), discard it ([lease.Store.Discard]), cancel
// an unfinished one ([lease.Store.Cancel]), pause and resume a queue, and
// set or clear a concurrency limit of a kind, a queue or a partition, or
// the default limit of the partitions, which has a form of its own
// ([lease.Store.SetLimit], [lease.Store.ClearLimit]), and set or clear a
// rate limit of a kind, a queue or a partition, or the default rate limit
// of the partitions (a form of its own), written M/PERIOD as
// [lease.ParseRate] reads it ([lease.Store.SetRateLimit],
// [lease.Store.ClearRateLimit]), make a queue fair (its default weight)
// or weigh a partition in it, and set a queue's priority aging, or clear
// either ([lease.Store.SetWeight], [lease.Store.ClearWeight],
// [lease.Store.SetAging], [lease.Store.ClearAging]).
// [Options.Authorize] decides a rate limit's change as a concurrency
// limit's ([ActionSetLimit], [ActionClearLimit]), with [Action].Rate
// set; and a weight's or an aging's as a change of its queue's limits,
// with [Action].Weight (and Partition) or [Action].Aging set, so that a
// hook written for the limits decides them too. The discard form
// carries the generation the page showed: if the event changed since, the
// discard is refused and the page says so. A limit's, a weight's or an
// aging's change is recorded in the limits' audit as made by [Options.Operator]'s name for the
// request, by default "console" and the request's remote address. After
// an action the browser is redirected (303 See Other) to the page it came
// from, with a message saying what happened.
//
// # Safety
//
// The console answers only to the host names it is given
// ([Options.AllowedHosts]; by default localhost and IP addresses): a
// request with another Host header gets 403, in plain text, before
// anything is read or rendered. A page of another site that reaches the
// console under its own name after DNS rebinding is the console's own
// origin to the browser, so only this check stops it.
//
// The console is read-only unless [Options.Actions] is set: no form is
// shown, and every POST is refused with 403. A GET never changes anything.
// An action is taken only from a POST that passes Go's
// [http.CrossOriginProtection] (a cross-origin browser request is refused)
// and carries the console's anti-forgery token in a hidden field; and,
// when [Options.Authorize] is set, only if it allows it. Authorize is asked
// about every page view too, and about each form before it is shown.
//
// Every value from the table (event ids, kinds, keys, queues, payloads,
// errors) is written through html/template, which escapes it for where it
// appears. The pages need no JavaScript and load nothing from elsewhere:
// the stylesheet is embedded and served at "static/console.css", and each
// response forbids scripts, frames and other origins' resources with a
// Content-Security-Policy.
//
// # Mounting
//
// Every link, form and redirect of the console is relative to the page it
// is on, so the console works under any prefix that [http.StripPrefix]
// removes, and behind a proxy that adds one. Its pages show times in UTC,
// as the database clock gives them.
package console
