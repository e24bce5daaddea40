package pgx

import "github.com/jackc/pgx/v5"

func pgxQuote(s string) string { return pgx.Identifier{s}.Sanitize() }
