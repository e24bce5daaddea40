package framework

import (
	"context"
)

// maxRetentionRounds bounds the statements of one retention run, so that a
// large backlog is worked off over several runs instead of in one burst.
const maxRetentionRounds = 10

// retain deletes finished rows (DONE and DISCARDED) older than
// Config.Retention every RetentionInterval, in batches of RetentionBatch.
// With DeleteAtCompletion (a zero Retention once normalized) completions
// delete their rows themselves, and the loop deletes DISCARDED rows once
// DedupeWindow old; with a negative Retention nothing is deleted.
func (w *Worker) retain(ctx context.Context) {
	if w.cfg.Retention < 0 {
		return
	}
	every(ctx, w.cfg.RetentionInterval, w.deleteFinished)
}

func (w *Worker) deleteFinished(ctx context.Context) {
	del := func(ctx context.Context) (int64, error) {
		return w.store.DeleteFinished(ctx, w.cfg.Retention, w.cfg.RetentionBatch)
	}
	if w.cfg.Retention == 0 { // DeleteAtCompletion: no DONE row is kept
		del = func(ctx context.Context) (int64, error) {
			return w.store.DeleteDiscarded(ctx, DedupeWindow, w.cfg.RetentionBatch)
		}
	}
	for range maxRetentionRounds {
		sctx, cancel := context.WithTimeout(ctx, w.cfg.statementTimeout())
		n, err := del(sctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("retention failed", "err", err)
			}
			return
		}
		w.count.retentionDeleted.Add(n)
		if n > 0 {
			w.log.Debug("deleted finished events", "rows", n)
		}
		if n < int64(w.cfg.RetentionBatch) {
			return
		}
	}
}
