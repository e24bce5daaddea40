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

// An application mounts the console under a prefix of its own router, and
// names the host names it is reached by. It is read-only unless
// Options.Actions is set: a POST to an action's address is refused, and
// nothing is sent to the database. A request under any other host name
// (a page of another site, after DNS rebinding) is refused before that.
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
	c, err := console.New(store, console.Options{AllowedHosts: []string{"ops.example.com"}})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/leasework/", http.StripPrefix("/leasework", c))

	form := url.Values{"queue": {"default"}}
	for _, host := range []string{"ops.example.com", "attacker.example"} {
		req := httptest.NewRequest(http.MethodPost, "http://"+host+"/leasework/queues/pause", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		body := rec.Body.String()
		fmt.Println(host, rec.Code, strings.Contains(body, "This console is read-only"), strings.Contains(body, "does not answer to the host name"))
	}
	// Output:
	// ops.example.com 403 true false
	// attacker.example 403 false true
}
