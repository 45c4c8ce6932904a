package election

// The simulator's scenario options and the findings it must keep passing.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// simOpts are a run's scenario flags: forced fault kinds (none: swarm),
// a forced ShutdownHandoff, mixed configs, scenario N5.
type simOpts struct {
	faults, handoff, direct string
	mixed, maxint           bool
}

func flagSimOpts() simOpts {
	return simOpts{faults: *simFaults, handoff: *simHandoff, direct: *simDirect, mixed: *simMixed, maxint: *simMaxInt}
}

// parseSimOpts reads the flags of a testdata/sim line.
func parseSimOpts(args []string) (simOpts, error) {
	var o simOpts
	for _, a := range args {
		switch k, v, _ := strings.Cut(a, "="); k {
		case "-sim.faults":
			o.faults = v
		case "-sim.handoff":
			o.handoff = v
		case "-sim.direct":
			o.direct = v
		case "-sim.mixed":
			o.mixed = true
		case "-sim.maxint":
			o.maxint = true
		default:
			return o, fmt.Errorf("unknown flag %q", a)
		}
	}
	return o, nil
}

func (o simOpts) String() string {
	var b strings.Builder
	if o.faults != "" {
		b.WriteString(" -sim.faults=" + o.faults)
	}
	if o.handoff != "" {
		b.WriteString(" -sim.handoff=" + o.handoff)
	}
	if o.direct != "" {
		b.WriteString(" -sim.direct=" + o.direct)
	}
	if o.mixed {
		b.WriteString(" -sim.mixed")
	}
	if o.maxint {
		b.WriteString(" -sim.maxint")
	}
	return b.String()
}

// Each line of testdata/sim/findings.txt is a seed and scenario that found
// a bug on the code before its fix (docs/simulation.md, Findings): it must
// pass now. A seed's scenario changes when the simulator or the election
// changes its draws, so these guard the scenarios, not exact histories.
func TestSimulationFindings(t *testing.T) {
	data, err := os.ReadFile("testdata/sim/findings.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		seed, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		opts, err := parseSimOpts(f[2:])
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if r := runSimSeed(seed, opts, false); r.err != nil {
			t.Errorf("%s, seed %d: %v\n%s\nreplay: %s", f[0], seed, r.err, r.trace, simReplay(seed, opts))
		}
	}
}
