package election

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	valid := Config{Namespace: "ns", Name: "lease", Identity: "pod-a",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, ClockSkewMargin: 500 * time.Millisecond}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "defaults are valid", mutate: func(*Config) {}},
		{name: "short timings are valid", mutate: func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod, c.ClockSkewMargin = 3*time.Second, 2*time.Second, 500*time.Millisecond, 200*time.Millisecond
		}},
		{name: "empty name", mutate: func(c *Config) { c.Name = "" }, wantErr: "lease name: must not be empty"},
		{name: "bad name", mutate: func(c *Config) { c.Name = "Not_A_Name" }, wantErr: "lease name \"Not_A_Name\""},
		{name: "bad namespace", mutate: func(c *Config) { c.Namespace = "a/b" }, wantErr: "lease namespace"},
		{name: "empty identity", mutate: func(c *Config) { c.Identity = " " }, wantErr: "identity"},
		{name: "lease duration not above renew deadline", mutate: func(c *Config) { c.LeaseDuration = 10 * time.Second }, wantErr: "lease duration 10s: must be greater than renew deadline"},
		{name: "sub-second lease", mutate: func(c *Config) { c.LeaseDuration = 900 * time.Millisecond }, wantErr: "at least 1s"},
		{name: "renew deadline too close to retry", mutate: func(c *Config) { c.RetryPeriod = 9 * time.Second }, wantErr: "renew deadline 10s: must be greater than 1.2 x retry period"},
		{name: "zero retry", mutate: func(c *Config) { c.RetryPeriod = 0 }, wantErr: "retry period 0s: must be positive"},
		{name: "negative margin", mutate: func(c *Config) { c.ClockSkewMargin = -time.Second }, wantErr: "clock skew margin -1s"},
		{name: "margin eats the lease", mutate: func(c *Config) { c.ClockSkewMargin = 13 * time.Second }, wantErr: "clock skew margin 13s: must be less than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.mutate(&c)
			err := c.Validate().ToAggregate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}
