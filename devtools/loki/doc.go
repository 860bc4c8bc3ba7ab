// Package loki is a wrapper module that builds Grafana Loki (pinned in
// go.mod) for hostcron's end-to-end tier and `make dev LOKI=1`:
//
//	go build -o loki github.com/grafana/loki/v3/cmd/loki
//
// It exists only to carry Loki's replace lines, which Go does not take
// from a dependency; scripts/loki.sh builds it once into the cache.
package loki
