// Package unittemplates holds the systemd unit templates for cron jobs. It
// lives beside the templates because go:embed cannot reach parent folders.
package unittemplates

import "embed"

// FS holds cron.timer.tmpl and cron.service.tmpl.
//
//go:embed *.tmpl
var FS embed.FS
