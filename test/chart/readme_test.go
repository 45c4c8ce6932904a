package chart

import (
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestReadmeListsEveryValue: every value in values.yaml has a row in the chart README's values table,
// and every row names a real value.
func TestReadmeListsEveryValue(t *testing.T) {
	readme := readFile(t, filepath.Join(chartDir(t), "README.md"))
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z0-9.]+)` \\|").FindAllStringSubmatch(readme, -1) {
		rows[m[1]] = true
	}
	var vals map[string]any
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(chartDir(t), "values.yaml"))), &vals); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if rows[prefix] {
			seen[prefix] = true
			return
		}
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 {
			t.Errorf("value %s is not in the README's values table", prefix)
			return
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			walk(p, m[k])
		}
	}
	walk("", vals)
	for r := range rows {
		if !seen[r] {
			t.Errorf("README row %s is not a value in values.yaml", r)
		}
	}
	if len(seen) < 50 {
		t.Errorf("only %d values documented; the table was not parsed?", len(seen))
	}
}
