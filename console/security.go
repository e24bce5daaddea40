package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
)

// sign returns the console's signature of text: HMAC-SHA256 under its
// key, base64url. The anti-forgery token is sign("csrf").
func (c *Console) sign(text string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(text))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// formToken is the name of the forms' hidden anti-forgery field.
const formToken = "csrf"

// maxFormBytes bounds an action's form: a reason and a few numbers.
const maxFormBytes = 16 << 10

// checkPost refuses, with the page that says why, a POST that may not act:
// actions disabled, a cross-origin request, or a form without the
// console's token. It parses the form. It reports whether the request may
// go on.
func (c *Console) checkPost(w http.ResponseWriter, r *http.Request) bool {
	if !c.opts.Actions {
		c.log.Warn("leasework console: action refused: actions are disabled", "path", r.URL.Path)
		c.fail(w, r, http.StatusForbidden, "This console is read-only: actions are disabled.")
		return false
	}
	if err := c.cop.Check(r); err != nil {
		c.log.Warn("leasework console: action refused: cross-origin request", "path", r.URL.Path, "origin", r.Header.Get("Origin"))
		c.fail(w, r, http.StatusForbidden, "Refused: the form was sent from another site (a cross-origin request).")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return false
	}
	if !hmac.Equal([]byte(r.PostForm.Get(formToken)), []byte(c.token)) {
		c.log.Warn("leasework console: action refused: missing or wrong form token", "path", r.URL.Path)
		c.fail(w, r, http.StatusForbidden, "Refused: the form's token is missing or wrong. Reload the page and try again.")
		return false
	}
	return true
}

// flash is the message an action leaves for the page it redirects to.
type flash struct {
	OK      bool
	Message string
}

// flashQuery returns the query that carries f, signed so that nobody can
// make the console show a message of theirs through a link.
func (c *Console) flashQuery(f flash) string {
	kind := "error"
	if f.OK {
		kind = "ok"
	}
	return url.Values{
		"flash": {f.Message},
		"fkind": {kind},
		"fsig":  {c.sign("flash\x00" + kind + "\x00" + f.Message)},
	}.Encode()
}

// readFlash returns the signed message of the request's query; nil if
// there is none or its signature is wrong.
func (c *Console) readFlash(r *http.Request) *flash {
	q := r.URL.Query()
	msg, kind, sig := q.Get("flash"), q.Get("fkind"), q.Get("fsig")
	if msg == "" || (kind != "ok" && kind != "error") {
		return nil
	}
	if !hmac.Equal([]byte(sig), []byte(c.sign("flash\x00"+kind+"\x00"+msg))) {
		return nil
	}
	return &flash{OK: kind == "ok", Message: msg}
}

// redirect sends the browser, with 303 See Other, to target (a path
// relative to the console's root, such as "events/7") with f's message.
// The Location is relative to the request's own address, so it is right
// under any prefix.
func (c *Console) redirect(w http.ResponseWriter, r *http.Request, target string, f flash) {
	w.Header().Set("Location", base(r)+target+"?"+c.flashQuery(f))
	w.WriteHeader(http.StatusSeeOther)
}

// notPost answers a request of an action's address with a method other
// than POST: nothing is done.
func (c *Console) notPost(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", http.MethodPost)
	c.fail(w, r, http.StatusMethodNotAllowed, "This address takes a form's POST only; nothing was done. Use the page's buttons.")
}
