// Package reqctx carries, in one context value, what slicerd's HTTP
// middlewares keep for one request: the start gate's place, the
// authenticated caller and the stream limits. Each middleware used to add
// its own value with http.Request.WithContext, which copies the request:
// three copies and three context values per request, held for the life of
// a watch stream (about 60 MB at 100,000 streams). Now the outermost
// middleware attaches one Values and the others fill it in.
//
// It owns only the carrier: each field is set and read by its middleware's
// package alone (internal/startgate, roles/auth, roles/watch), which keep
// their types to themselves.
package reqctx

import (
	"context"
	"net/http"
)

// Values is what the middlewares keep for one request. A middleware sets
// its field before it calls the next handler; handlers read them after.
type Values struct {
	Place  any // internal/startgate: the request's place at the gate
	Caller any // roles/auth: the authenticated caller
	Limits any // roles/watch: the stream's send limits
}

type key struct{}

// Attach returns r carrying Values, and the Values: r itself when an
// outer middleware attached them already, else one copy of r.
func Attach(r *http.Request) (*http.Request, *Values) {
	if v, ok := r.Context().Value(key{}).(*Values); ok {
		return r, v
	}
	v := &Values{}
	return r.WithContext(context.WithValue(r.Context(), key{}, v)), v
}

// From returns the Values of the request ctx belongs to, or nil.
func From(ctx context.Context) *Values {
	v, _ := ctx.Value(key{}).(*Values)
	return v
}
