package console_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"

	"github.com/leasework/leasework/console"
	"github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/lease"
)

// An application mounts the console under a prefix of its own router. It
// is read-only unless Options.Actions is set: a POST to an action's
// address is refused, and nothing is sent to the database.
func Example() {
	drv := pgx.New()
	db, err := drv.Open(os.Getenv("LEASEWORK_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := lease.New(db, drv, lease.Options{})
	if err != nil {
		log.Fatal(err)
	}
	c, err := console.New(store, console.Options{})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/leasework/", http.StripPrefix("/leasework", c))

	form := url.Values{"queue": {"default"}}
	req := httptest.NewRequest(http.MethodPost, "/leasework/queues/pause", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	fmt.Println(rec.Code, strings.Contains(rec.Body.String(), "This console is read-only"))
	// Output:
	// 403 true
}
