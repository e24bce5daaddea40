package framework

import (
	"context"
)

// maxRetentionRounds bounds the statements of one retention run, so that a
// large backlog is worked off over several runs instead of in one burst.
const maxRetentionRounds = 10

// retain deletes DONE rows older than Config.Retention every
// RetentionInterval, in batches of RetentionBatch. With DeleteAtCompletion
// (a zero Retention once normalized) completions delete their rows
// themselves; with a negative Retention nothing is deleted.
func (w *Worker) retain(ctx context.Context) {
	if w.cfg.Retention <= 0 {
		return
	}
	every(ctx, w.cfg.RetentionInterval, w.deleteFinished)
}

func (w *Worker) deleteFinished(ctx context.Context) {
	for range maxRetentionRounds {
		sctx, cancel := context.WithTimeout(ctx, w.cfg.statementTimeout())
		n, err := w.store.DeleteFinished(sctx, w.cfg.Retention, w.cfg.RetentionBatch)
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
