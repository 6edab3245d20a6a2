package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// RDBInfo is what a snapshot (RDB) says about itself.
type RDBInfo struct {
	// Version is the format's version (10: Redis 7.0, 11: 7.2, 12: 7.4 and 8.0; Valkey 8 writes 11).
	Version int
	// Aux holds the header's fields (redis-ver, ctime, used-mem, repl-id, ...).
	Aux map[string]string
	// Keys is the sum of the databases' sizes as the snapshot records them (RESIZEDB).
	Keys int64
	// Complete is true when the whole snapshot was read to its end marker, so that Keys counts
	// every database; false when a value type this reader does not know (a module's) stopped it.
	Complete bool
}

// errUnknownType stops a scan at a value it cannot skip.
var errUnknownType = errors.New("unknown value type")

// ScanRDB reads a snapshot from r to its end marker and reports its header and key count. It
// holds one value's string at a time, never the snapshot. A value type it does not know ends the
// scan without an error (Complete false); a malformed or truncated snapshot is an error.
func ScanRDB(r io.Reader) (RDBInfo, error) {
	br := &rdbReader{r: bufio.NewReaderSize(r, 64<<10)}
	info := RDBInfo{Aux: map[string]string{}}
	magic := make([]byte, 9)
	if _, err := io.ReadFull(br.r, magic); err != nil {
		return info, fmt.Errorf("snapshot header: %w", err)
	}
	if string(magic[:5]) != "REDIS" && string(magic[:6]) != "VALKEY" {
		return info, fmt.Errorf("not a snapshot: it starts with %q", magic[:5])
	}
	v, err := strconv.Atoi(string(magic[5:]))
	if err != nil {
		return info, fmt.Errorf("snapshot header %q: no version", magic)
	}
	info.Version = v
	for {
		op, err := br.byte()
		if err != nil {
			return info, fmt.Errorf("snapshot truncated: %w", err)
		}
		switch op {
		case 0xFF: // EOF, then an 8-byte checksum
			if _, err := br.skip(8); err != nil {
				return info, fmt.Errorf("snapshot truncated in its checksum: %w", err)
			}
			info.Complete = true
			return info, nil
		case 0xFE: // SELECTDB
			_, err = br.length()
		case 0xFD: // EXPIRETIME (s)
			_, err = br.skip(4)
		case 0xFC: // EXPIRETIME_MS
			_, err = br.skip(8)
		case 0xFB: // RESIZEDB: keys, keys with an expiry
			var n uint64
			if n, err = br.length(); err == nil {
				info.Keys += int64(n)
				_, err = br.length()
			}
		case 0xFA: // AUX
			var k, val string
			if k, err = br.str(); err == nil {
				if val, err = br.str(); err == nil && len(info.Aux) < 64 {
					info.Aux[k] = val
				}
			}
		case 0xF9: // FREQ
			_, err = br.skip(1)
		case 0xF8: // IDLE
			_, err = br.length()
		case 0xF7: // MODULE_AUX
			if _, err = br.length(); err == nil {
				if _, err = br.length(); err == nil {
					err = br.moduleValue()
				}
			}
		case 0xF5: // FUNCTION2
			_, err = br.str()
		case 0xF4: // SLOT_INFO (slot, size, expires size)
			for i := 0; i < 3 && err == nil; i++ {
				_, err = br.length()
			}
		default:
			if _, err = br.str(); err == nil { // the key
				err = br.value(op)
			}
			if errors.Is(err, errUnknownType) {
				return info, nil
			}
		}
		if err != nil {
			return info, fmt.Errorf("snapshot malformed or truncated (opcode %#x): %w", op, err)
		}
	}
}

type rdbReader struct {
	r *bufio.Reader
}

func (b *rdbReader) byte() (byte, error) { return b.r.ReadByte() }

func (b *rdbReader) skip(n uint64) (uint64, error) {
	got, err := b.r.Discard(int(n))
	if err == nil && uint64(got) != n {
		err = io.ErrUnexpectedEOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return uint64(got), err
}

// lengthOrEncoding reads a length; encoded reports a special string encoding (its kind in n).
func (b *rdbReader) lengthOrEncoding() (n uint64, encoded bool, err error) {
	c, err := b.byte()
	if err != nil {
		return 0, false, err
	}
	switch c >> 6 {
	case 0:
		return uint64(c & 0x3F), false, nil
	case 1:
		d, err := b.byte()
		return uint64(c&0x3F)<<8 | uint64(d), false, err
	case 2:
		var buf [8]byte
		switch c {
		case 0x80:
			_, err = io.ReadFull(b.r, buf[:4])
			return uint64(binary.BigEndian.Uint32(buf[:4])), false, err
		case 0x81:
			_, err = io.ReadFull(b.r, buf[:])
			return binary.BigEndian.Uint64(buf[:]), false, err
		}
		return 0, false, fmt.Errorf("bad length byte %#x", c)
	}
	return uint64(c & 0x3F), true, nil
}

func (b *rdbReader) length() (uint64, error) {
	n, enc, err := b.lengthOrEncoding()
	if err == nil && enc {
		err = fmt.Errorf("an encoded string where a length belongs")
	}
	return n, err
}

// maxAuxString bounds the strings kept (header fields); longer ones are skipped.
const maxAuxString = 1 << 10

// str reads a string, returning it when it is short (header fields), skipping it otherwise.
func (b *rdbReader) str() (string, error) {
	n, enc, err := b.lengthOrEncoding()
	if err != nil {
		return "", err
	}
	if enc {
		switch n {
		case 0:
			c, err := b.byte()
			return strconv.Itoa(int(int8(c))), err
		case 1:
			var buf [2]byte
			_, err := io.ReadFull(b.r, buf[:])
			return strconv.Itoa(int(int16(binary.LittleEndian.Uint16(buf[:])))), err
		case 2:
			var buf [4]byte
			_, err := io.ReadFull(b.r, buf[:])
			return strconv.Itoa(int(int32(binary.LittleEndian.Uint32(buf[:])))), err
		case 3: // LZF: compressed length, length, data
			clen, err := b.length()
			if err == nil {
				if _, err = b.length(); err == nil {
					_, err = b.skip(clen)
				}
			}
			return "", err
		}
		return "", fmt.Errorf("unknown string encoding %d", n)
	}
	if n > maxAuxString {
		_, err := b.skip(n)
		return "", err
	}
	buf := make([]byte, n)
	_, err = io.ReadFull(b.r, buf)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return string(buf), err
}

func (b *rdbReader) strs(n uint64) error {
	for i := uint64(0); i < n; i++ {
		if _, err := b.str(); err != nil {
			return err
		}
	}
	return nil
}

// value skips one value of type t.
func (b *rdbReader) value(t byte) error {
	switch t {
	case 0, 9, 10, 11, 12, 13, 16, 17, 20: // a string, or one encoded blob
		_, err := b.str()
		return err
	case 1, 2, 14: // list, set, quicklist: n strings
		n, err := b.length()
		if err != nil {
			return err
		}
		return b.strs(n)
	case 4: // hash: n pairs
		n, err := b.length()
		if err != nil {
			return err
		}
		return b.strs(2 * n)
	case 3: // zset: n (member, score as a string of one length byte)
		n, err := b.length()
		for i := uint64(0); i < n && err == nil; i++ {
			if _, err = b.str(); err == nil {
				var l byte
				if l, err = b.byte(); err == nil && l < 253 {
					_, err = b.skip(uint64(l))
				}
			}
		}
		return err
	case 5: // zset2: n (member, binary double)
		n, err := b.length()
		for i := uint64(0); i < n && err == nil; i++ {
			if _, err = b.str(); err == nil {
				_, err = b.skip(8)
			}
		}
		return err
	case 18: // quicklist2: n (container, listpack)
		n, err := b.length()
		for i := uint64(0); i < n && err == nil; i++ {
			if _, err = b.length(); err == nil {
				_, err = b.str()
			}
		}
		return err
	case 15, 19, 21:
		return b.stream(t)
	case 7:
		if _, err := b.length(); err != nil { // module id
			return err
		}
		return b.moduleValue()
	}
	return errUnknownType
}

func (b *rdbReader) lengths(n int) error {
	for i := 0; i < n; i++ {
		if _, err := b.length(); err != nil {
			return err
		}
	}
	return nil
}

// stream skips a stream (types 15, 19 and 21: listpacks, then consumer groups).
func (b *rdbReader) stream(t byte) error {
	n, err := b.length()
	if err != nil {
		return err
	}
	if err := b.strs(2 * n); err != nil { // node keys and listpacks
		return err
	}
	meta := 3 // length, last id
	if t >= 19 {
		meta += 5 // first id, max deleted id, entries added
	}
	if err := b.lengths(meta); err != nil {
		return err
	}
	groups, err := b.length()
	for g := uint64(0); g < groups && err == nil; g++ {
		if _, err = b.str(); err != nil {
			break
		}
		perGroup := 2
		if t >= 19 {
			perGroup++ // entries read
		}
		if err = b.lengths(perGroup); err != nil {
			break
		}
		var pel uint64
		if pel, err = b.length(); err != nil {
			break
		}
		for i := uint64(0); i < pel && err == nil; i++ {
			if _, err = b.skip(16 + 8); err == nil { // id, delivery time
				_, err = b.length() // delivery count
			}
		}
		var consumers uint64
		if err == nil {
			consumers, err = b.length()
		}
		for c := uint64(0); c < consumers && err == nil; c++ {
			if _, err = b.str(); err != nil {
				break
			}
			times := uint64(8)
			if t >= 21 {
				times += 8 // active time
			}
			if _, err = b.skip(times); err != nil {
				break
			}
			var cpel uint64
			if cpel, err = b.length(); err == nil {
				_, err = b.skip(16 * cpel)
			}
		}
	}
	return err
}

// moduleValue skips a module's self-describing value (opcodes until EOF).
func (b *rdbReader) moduleValue() error {
	for {
		op, err := b.length()
		if err != nil {
			return err
		}
		switch op {
		case 0:
			return nil
		case 1, 2:
			_, err = b.length()
		case 3:
			_, err = b.skip(4)
		case 4:
			_, err = b.skip(8)
		case 5:
			_, err = b.str()
		default:
			return errUnknownType
		}
		if err != nil {
			return err
		}
	}
}
