package snapshot

import (
	"context"
	"fmt"
	"io"

	"golang.org/x/time/rate"
)

// paceBurst is the most a paced reader reads at once.
const paceBurst = 256 << 10

// paced returns r read at most bytesPerSecond (r itself when not positive). The member's fork
// that writes the snapshot waits on its socket meanwhile, so its CPU follows the pace too.
func paced(ctx context.Context, r io.Reader, bytesPerSecond int64) io.Reader {
	if bytesPerSecond <= 0 {
		return r
	}
	return &pacedReader{ctx: ctx, r: r, lim: rate.NewLimiter(rate.Limit(bytesPerSecond), paceBurst)}
}

type pacedReader struct {
	ctx context.Context
	r   io.Reader
	lim *rate.Limiter
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if len(b) > paceBurst {
		b = b[:paceBurst]
	}
	n, err := p.r.Read(b)
	if n > 0 {
		if werr := p.lim.WaitN(p.ctx, n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}

// rateString is a cap for a log line.
func rateString(bytesPerSecond int64) string {
	if bytesPerSecond <= 0 {
		return "no rate limit"
	}
	return fmt.Sprintf("%d MiB/s", bytesPerSecond>>20)
}
