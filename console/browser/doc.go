// Package browser holds the operator console's browser tests: they drive
// the console of package console in a headless Chromium through the
// DevTools protocol (github.com/chromedp/chromedp). It is a module of its
// own, so that chromedp stays out of the core module's dependencies; it has
// no code to import.
package browser
