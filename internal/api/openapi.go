package api

import _ "embed"

// OpenAPI is the published API document, served at /api/v1/openapi.yaml;
// the tests check every response against it.
//
//go:embed openapi.yaml
var OpenAPI []byte
