package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"example.com/cache-operator/localcluster/node/images"
)

// buildImages is `node-agent build-images`: it builds every root of the image table that is not
// built yet (make cluster-bin runs it), the roots of different suites at once, and prints one line
// per root: its build time and size, or that it was there.
func buildImages(args []string) int {
	fs := flag.NewFlagSet("build-images", flag.ExitOnError)
	tablePath := fs.String("images", "", "image table (YAML)")
	store := &images.Store{}
	fs.StringVar(&store.Dir, "image-store", images.DefaultStoreDir(), "folder of the images' root filesystems")
	fs.StringVar(&store.Mirror, "debian-mirror", images.DefaultMirror, "Debian registry the roots are built from")
	_ = fs.Parse(args)
	table, err := images.Load(*tablePath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "build-images:", err)
		return 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	bySuite := map[string][]string{}
	for name, r := range table.Roots {
		bySuite[r.Suite] = append(bySuite[r.Suite], name)
	}
	start := time.Now()
	var mu sync.Mutex
	failed := 0
	var wg sync.WaitGroup
	for _, names := range bySuite {
		sort.Strings(names)
		wg.Add(1)
		go func() { // a suite's roots one after the other: each reuses the packages of the last
			defer wg.Done()
			for _, name := range names {
				root, built, err := store.Ensure(ctx, name, table.Roots[name], func(line string) {
					mu.Lock()
					fmt.Println("images:", line)
					mu.Unlock()
				})
				mu.Lock()
				switch {
				case err != nil:
					fmt.Fprintf(os.Stderr, "images: %s: %v\n", name, err)
					failed++
				case !built:
					fmt.Printf("images: %s is built (%d MiB, %s)\n", name, root.Size>>20, root.Path)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed > 0 {
		return 1
	}
	fmt.Printf("images: %d roots ready in %s (%.0fs)\n", len(table.Roots), store.Dir, time.Since(start).Seconds())
	return 0
}
