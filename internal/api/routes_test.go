package api

import (
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"
)

// TestEveryRouteIsDocumented holds every route the server registers to the
// OpenAPI document, so a new endpoint cannot ship undescribed; the
// response check (checkSpec) then covers the answers of those a test calls.
func TestEveryRouteIsDocumented(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`:([a-z_]+)`)
	for _, r := range New(nil, Config{AdminKey: "x"}).Routes() {
		if r.Method == echo.RouteNotFound || strings.HasSuffix(r.Path, "*") { // echo's own, for a group
			continue
		}
		path := param.ReplaceAllString(r.Path, "{$1}")
		item := doc.Paths.Find(path)
		if item == nil || item.GetOperation(r.Method) == nil {
			t.Errorf("%s %s is not in the OpenAPI document", r.Method, path)
		}
	}
}
