package kubectlelector

import (
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
)

// outputFormats is what `status -o` takes, as kubectl's own help lists them.
const outputFormats = "json, yaml, wide, name, jsonpath=TEMPLATE"

// output is a parsed `-o`: a table (plain or wide), a structured object (json, yaml), names, or a jsonpath
// template (kubectl's JSONPath printer from cli-runtime).
type output struct {
	format   string // "", "wide", "json", "yaml", "name", "jsonpath"
	jsonpath *printers.JSONPathPrinter
}

// parseOutput parses -o as kubectl does: "jsonpath=TEMPLATE" (also with '...' or {...} quoting left to
// the shell) compiles the template here, so a bad one is a usage error before any API call.
func parseOutput(s string) (output, error) {
	switch s {
	case "", "wide", "json", "yaml", "name":
		return output{format: s}, nil
	}
	if tmpl, ok := strings.CutPrefix(s, "jsonpath="); ok {
		if tmpl == "" {
			return output{}, usagef("--output %q: jsonpath= needs a template, e.g. jsonpath='{.holder}'", s)
		}
		p, err := printers.NewJSONPathPrinter(tmpl)
		if err != nil {
			return output{}, usagef("--output %q: %v", s, err)
		}
		p.AllowMissingKeys(true) // kubectl's default (--allow-missing-template-keys=true)
		return output{format: "jsonpath", jsonpath: p}, nil
	}
	return output{}, usagef("--output %q: must be one of %s", s, outputFormats)
}

// table reports whether the output is a table (events are printed after it).
func (o output) table() bool { return o.format == "" || o.format == "wide" }

// print writes obj (a LeaseStatus or LeaseStatusList, whose rows are items) in the format.
func (o output) print(out io.Writer, obj runtime.Object, items []LeaseStatus, allNamespaces bool) error {
	switch o.format {
	case "json":
		return (&printers.JSONPrinter{}).PrintObj(obj, out)
	case "yaml":
		return (&printers.YAMLPrinter{}).PrintObj(obj, out)
	case "jsonpath":
		return o.jsonpath.PrintObj(obj, out)
	case "name":
		return PrintNames(out, items)
	case "wide":
		return PrintWideTable(out, items, allNamespaces)
	}
	return PrintTable(out, items, allNamespaces)
}

// PrintNames writes one "lease.coordination.k8s.io/NAME" per Lease, as `kubectl get -o name` does.
func PrintNames(out io.Writer, items []LeaseStatus) error {
	for _, s := range items {
		if _, err := fmt.Fprintf(out, "lease.coordination.k8s.io/%s\n", s.Name); err != nil {
			return err
		}
	}
	return nil
}

// PrintWideTable is PrintTable with the absolute renew time (RFC 3339, the holder's clock) and the UID.
func PrintWideTable(out io.Writer, items []LeaseStatus, allNamespaces bool) error {
	w := printers.GetNewTabWriter(out)
	if allNamespaces {
		_, _ = fmt.Fprint(w, "NAMESPACE\t")
	}
	_, _ = fmt.Fprintln(w, "LEASE\tHOLDER\tTOKEN\tRENEWED\tDURATION\tEXPIRES IN\tRENEW TIME\tUID")
	for _, s := range items {
		if allNamespaces {
			fmt.Fprintf(w, "%s\t", s.Namespace)
		}
		renewTime := "-"
		if s.RenewTime != nil {
			renewTime = s.RenewTime.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", s.Name, orNone(s.Holder), s.Token, renewed(s), leaseDuration(s), expiresIn(s),
			renewTime, orNone(s.UID))
	}
	return w.Flush()
}
