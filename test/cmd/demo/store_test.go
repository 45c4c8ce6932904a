package main

import (
	"strings"
	"testing"
)

func TestParseStoreKindAcceptsTheDemoStores(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "", want: storeEmbedded},
		{in: "embedded", want: storeEmbedded},
		{in: "postgres", want: storePostgres},
		{in: "redis", want: storeRedis},
		{in: "memory", want: storeEmbedded},
		{in: "mysql", wantErr: `--store "mysql": want embedded (or memory), postgres or redis`},
		{in: "Postgres", wantErr: `--store "Postgres"`},
	}
	for _, tt := range tests {
		got, err := parseStoreKind(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseStoreKind(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseStoreKind(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
