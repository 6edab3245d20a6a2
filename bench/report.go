package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// summary is one configuration's result: the median of its runs, figure by figure. The request
// breakdowns and the curves are those of the median run (by the operator's time).
type summary struct {
	runResult
	Runs   int    `json:"runs"`
	Date   string `json:"date"`
	Commit string `json:"commit"`
	Flags  string `json:"operator_flags,omitempty"`
	// CPUMsPerCache is the operator's CPU over the whole run (converge, idle, roll) per cache;
	// ConvergeCPUMsPerCache until the caches first converged (its start included).
	CPUMsPerCache         float64 `json:"cpu_ms_per_cache"`
	ConvergeCPUMsPerCache float64 `json:"converge_cpu_ms_per_cache"`
	// Plot is the PNG of caches Ready over time, relative to the results folder.
	Plot string `json:"plot,omitempty"`
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// summarize takes the median of each figure over runs of one configuration.
func summarize(runs []runResult) summary {
	byTime := append([]runResult(nil), runs...)
	sort.Slice(byTime, func(i, j int) bool { return byTime[i].OperatorS < byTime[j].OperatorS })
	s := summary{runResult: byTime[(len(byTime)-1)/2], Runs: len(runs)}
	med := func(f func(r runResult) float64) float64 {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	s.OperatorS = med(func(r runResult) float64 { return r.OperatorS })
	s.OracleS = med(func(r runResult) float64 { return r.OracleS })
	s.Ratio = med(func(r runResult) float64 { return r.Ratio })
	s.WritesPerCache = med(func(r runResult) float64 { return r.WritesPerCache })
	s.ReadsBeyondWatch = int(med(func(r runResult) float64 { return float64(r.ReadsBeyondWatch) }))
	s.IdleRequests = int(med(func(r runResult) float64 { return float64(r.IdleRequests) }))
	s.RollS = med(func(r runResult) float64 { return r.RollS })
	s.RollReady = int(med(func(r runResult) float64 { return float64(r.RollReady) }))
	s.RollWritesPerCache = med(func(r runResult) float64 { return r.RollWritesPerCache })
	s.PeakRSSMiB = med(func(r runResult) float64 { return r.PeakRSSMiB })
	s.ConvergedRSSMiB = med(func(r runResult) float64 { return r.ConvergedRSSMiB })
	s.PeakHeapMiB = med(func(r runResult) float64 { return r.PeakHeapMiB })
	s.GCPercent = med(func(r runResult) float64 { return r.GCPercent })
	s.CPUS = med(func(r runResult) float64 { return r.CPUS })
	s.CPUConvergeS = med(func(r runResult) float64 { return r.CPUConvergeS })
	s.CPUIdleS = med(func(r runResult) float64 { return r.CPUIdleS })
	s.CPURollS = med(func(r runResult) float64 { return r.CPURollS })
	s.CPUMsPerCache = s.CPUS * 1000 / float64(s.N)
	s.ConvergeCPUMsPerCache = s.CPUConvergeS * 1000 / float64(s.N)
	return s
}

// merge puts fresh summaries into those already recorded, replacing the same configuration
// (N and foreign objects), and sorts them.
func merge(old, fresh []summary) []summary {
	key := func(s summary) string { return fmt.Sprintf("%d/%d", s.N, s.Foreign) }
	byKey := map[string]summary{}
	for _, s := range old {
		byKey[key(s)] = s
	}
	for _, s := range fresh {
		byKey[key(s)] = s
	}
	out := make([]summary, 0, len(byKey))
	for _, s := range byKey {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Foreign != out[j].Foreign {
			return out[i].Foreign < out[j].Foreign
		}
		return out[i].N < out[j].N
	})
	return out
}

func readResults(path string) ([]summary, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []summary
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

func writeResults(path string, all []summary) error {
	raw, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}

// writeTable prints the main figures, one configuration a row.
func writeTable(w io.Writer, all []summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "N\tforeign\truns\toperator s\toracle s\tratio\twrites/cache\treads beyond watch\tidle requests\troll s\troll writes/cache\tpeak RSS MiB\tpeak heap MiB\tCPU s converging\tms/cache\tCPU s in all\tms/cache\t")
	for _, s := range all {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.1f\t%.1f\t%.3f\t%.2f\t%d\t%d\t%s\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n",
			s.N, s.Foreign, s.Runs, s.OperatorS, s.OracleS, s.Ratio, s.WritesPerCache, s.ReadsBeyondWatch, s.IdleRequests,
			rollCell(s), s.RollWritesPerCache, s.PeakRSSMiB, s.PeakHeapMiB, s.CPUConvergeS, s.ConvergeCPUMsPerCache, s.CPUS, s.CPUMsPerCache)
	}
	tw.Flush()
}

// rollCell is the rolling change's time, or, when its bound ran out, how many caches rolled in it.
func rollCell(s summary) string {
	if s.RollReady < s.N {
		return fmt.Sprintf("%d of %d in %.0f", s.RollReady, s.N, s.RollS)
	}
	return fmt.Sprintf("%.1f", s.RollS)
}

// markdown is the results section of BENCHMARKS.md.
func markdown(all []summary) string {
	var b strings.Builder
	b.WriteString("| N | foreign objects | runs | operator s | oracle s | ratio | writes/cache | reads beyond list/watch | requests while idle | roll s | roll writes/cache | peak RSS MiB | peak heap MiB | CPU s converging (ms/cache) | CPU s in all (ms/cache) | measured |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range all {
		fmt.Fprintf(&b, "| %d | %d | %d | %.1f | %.1f | %.3f | %.2f | %d | %d in %.0f s | %s | %.2f | %.1f | %.1f | %.1f (%.0f) | %.1f (%.0f) | %s %s |\n",
			s.N, s.Foreign, s.Runs, s.OperatorS, s.OracleS, s.Ratio, s.WritesPerCache, s.ReadsBeyondWatch, s.IdleRequests, s.IdleWindowS,
			rollCell(s), s.RollWritesPerCache, s.PeakRSSMiB, s.PeakHeapMiB, s.CPUConvergeS, s.ConvergeCPUMsPerCache, s.CPUS, s.CPUMsPerCache, s.Date, s.Commit)
	}
	b.WriteString("\nThe operator's requests while its caches converged (median run), per configuration:\n\n")
	for _, s := range all {
		fmt.Fprintf(&b, "- N=%d, %d foreign: %s\n", s.N, s.Foreign, s.Converge.describe())
	}
	if g := growth(all); g != "" {
		b.WriteString("\n" + g)
	}
	b.WriteString("\n")
	for _, s := range all {
		if s.Plot != "" {
			fmt.Fprintf(&b, "![caches Ready over time, N=%d, %d foreign objects](bench/results/%s)\n", s.N, s.Foreign, s.Plot)
		}
	}
	return b.String()
}

// growth says how cost grows per cache between the smallest and the largest N measured without
// foreign objects, and what the foreign objects added at the same N.
func growth(all []summary) string {
	var plain []summary
	for _, s := range all {
		if s.Foreign == 0 {
			plain = append(plain, s)
		}
	}
	var b strings.Builder
	if len(plain) >= 2 {
		a, z := plain[0], plain[len(plain)-1]
		dn := float64(z.N - a.N)
		fmt.Fprintf(&b, "Growth from N=%d to N=%d, per added cache: peak RSS %+.1f KiB, converged RSS %+.1f KiB, peak heap %+.1f KiB, CPU %+.1f ms converging and %+.1f ms in all, time to all Ready %+.3f s (oracle %+.3f s).\n",
			a.N, z.N, (z.PeakRSSMiB-a.PeakRSSMiB)*1024/dn, (z.ConvergedRSSMiB-a.ConvergedRSSMiB)*1024/dn, (z.PeakHeapMiB-a.PeakHeapMiB)*1024/dn,
			(z.CPUConvergeS-a.CPUConvergeS)*1000/dn, (z.CPUS-a.CPUS)*1000/dn, (z.OperatorS-a.OperatorS)/dn, (z.OracleS-a.OracleS)/dn)
	}
	for _, s := range all {
		if s.Foreign == 0 {
			continue
		}
		for _, p := range plain {
			if p.N == s.N {
				fmt.Fprintf(&b, "With %d foreign objects at N=%d: peak RSS %+.1f MiB, converged RSS %+.1f MiB, peak heap %+.1f MiB against the run without them.\n",
					s.Foreign, s.N, s.PeakRSSMiB-p.PeakRSSMiB, s.ConvergedRSSMiB-p.ConvergedRSSMiB, s.PeakHeapMiB-p.PeakHeapMiB)
			}
		}
	}
	return b.String()
}

const beginMarker, endMarker = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"

// updateBenchmarks replaces the results section of BENCHMARKS.md (between the markers).
func updateBenchmarks(path string, all []summary) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(raw)
	i, j := strings.Index(doc, beginMarker), strings.Index(doc, endMarker)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s section", path, beginMarker, endMarker)
	}
	doc = doc[:i+len(beginMarker)] + "\n" + markdown(all) + doc[j:]
	return os.WriteFile(path, []byte(doc), 0o644)
}

// steps turns ascending ready times into a step curve: caches Ready against seconds.
func steps(curve []float64) plotter.XYs {
	pts := plotter.XYs{{X: 0, Y: 0}}
	for i, t := range curve {
		pts = append(pts, plotter.XY{X: t, Y: float64(i)}, plotter.XY{X: t, Y: float64(i + 1)})
	}
	return pts
}

// plotReady draws caches Ready over time, operator against oracle, as a PNG.
func plotReady(path string, s summary) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%d caches (sizes 1-3), %d foreign objects: Ready over time", s.N, s.Foreign)
	p.X.Label.Text = "seconds since the first create"
	p.Y.Label.Text = "caches Ready"
	p.Legend.Top, p.Legend.Left = false, false
	for _, line := range []struct {
		name  string
		curve []float64
		color color.RGBA
	}{
		{fmt.Sprintf("operator (%.1f s)", s.OperatorS), s.OperatorCurve, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}},
		{fmt.Sprintf("oracle: children applied directly (%.1f s)", s.OracleS), s.OracleCurve, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}},
	} {
		l, err := plotter.NewLine(steps(line.curve))
		if err != nil {
			return err
		}
		l.Color = line.color
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(line.name, l)
	}
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}

// plotName is the PNG's name for a configuration.
func plotName(s summary) string {
	if s.Foreign > 0 {
		return fmt.Sprintf("ready-n%d-foreign%d.png", s.N, s.Foreign)
	}
	return fmt.Sprintf("ready-n%d.png", s.N)
}

func resultsPath(dir string) string { return filepath.Join(dir, "latest.json") }
