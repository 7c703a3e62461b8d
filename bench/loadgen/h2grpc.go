package main

// A minimal gRPC-over-HTTP/2 client for unary calls, used as the default gRPC load: grpc-go
// spends ~100 us of CPU per call on this machine (its writer goroutine, per-call stream
// bookkeeping, BDP pings), a third of what the Python server spends, and on 2 cores that
// CPU comes out of the server's budget. This client writes a call's HEADERS and DATA frames
// straight from the calling goroutine and lets one reader goroutine per connection hand the
// trailers back; the server sees an ordinary gRPC client. -client grpc-go uses grpc-go
// instead, to cross-check.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
)

// Windows large enough that the server never waits for a WINDOW_UPDATE from us.
const (
	streamWindow     = 1 << 30
	connWindowTarget = 1 << 30
	connWindowRefill = 1 << 20
)

type h2call struct {
	done    chan error
	gotData bool
}

type h2conn struct {
	authority string
	conn      net.Conn

	writeMu sync.Mutex // guards everything below it up to mu, and the order of frames
	writer  *bufio.Writer
	framer  *http2.Framer
	encoder *hpack.Encoder
	headers bytes.Buffer
	nextID  uint32

	mu       sync.Mutex // guards calls and broken
	calls    map[uint32]*h2call
	broken   error
	received uint32 // DATA bytes since the last connection WINDOW_UPDATE (reader only)
}

func dialH2(target string) (*h2conn, error) {
	conn, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := &h2conn{
		authority: target,
		conn:      conn,
		writer:    bufio.NewWriterSize(conn, 32*1024),
		nextID:    1,
		calls:     make(map[uint32]*h2call),
	}
	c.framer = http2.NewFramer(c.writer, bufio.NewReaderSize(conn, 64*1024))
	c.framer.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.encoder = hpack.NewEncoder(&c.headers)
	if _, err := c.writer.WriteString(http2.ClientPreface); err != nil {
		return nil, err
	}
	if err := c.framer.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
		http2.Setting{ID: http2.SettingEnablePush, Val: 0}); err != nil {
		return nil, err
	}
	if err := c.framer.WriteWindowUpdate(0, connWindowTarget-65535); err != nil {
		return nil, err
	}
	if err := c.writer.Flush(); err != nil {
		return nil, err
	}
	go c.read()
	return c, nil
}

func (c *h2conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken == nil {
		c.broken = err
	}
	for id, call := range c.calls {
		call.done <- err
		delete(c.calls, id)
	}
}

func (c *h2conn) isBroken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken != nil
}

func (c *h2conn) finish(id uint32, err error) {
	c.mu.Lock()
	call := c.calls[id]
	delete(c.calls, id)
	c.mu.Unlock()
	if call == nil {
		return
	}
	if err == nil && !call.gotData {
		err = errors.New("response without a message")
	}
	call.done <- err
}

// control writes a frame the reader owes the server (settings ack, ping ack, window).
func (c *h2conn) control(write func() error) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if err := write(); err != nil {
		return err
	}
	return c.writer.Flush()
}

func (c *h2conn) read() {
	for {
		frame, err := c.framer.ReadFrame()
		if err != nil {
			c.fail(fmt.Errorf("reading from the server: %w", err))
			return
		}
		switch f := frame.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = c.control(c.framer.WriteSettingsAck)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				err = c.control(func() error { return c.framer.WritePing(true, f.Data) })
			}
		case *http2.DataFrame:
			c.received += uint32(len(f.Data()))
			if c.received >= connWindowRefill {
				refill := c.received
				c.received = 0
				err = c.control(func() error { return c.framer.WriteWindowUpdate(0, refill) })
			}
			if len(f.Data()) > 5 {
				c.mu.Lock()
				if call := c.calls[f.StreamID]; call != nil {
					call.gotData = true
				}
				c.mu.Unlock()
			}
			if f.StreamEnded() {
				c.finish(f.StreamID, errors.New("stream ended without trailers"))
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() { // trailers (or a trailers-only error answer)
				status, message := "", ""
				for _, field := range f.Fields {
					switch field.Name {
					case "grpc-status":
						status = field.Value
					case "grpc-message":
						message = field.Value
					}
				}
				var callErr error
				if status != "0" {
					callErr = fmt.Errorf("grpc-status %q: %s", status, message)
				}
				c.finish(f.StreamID, callErr)
			}
		case *http2.RSTStreamFrame:
			c.finish(f.StreamID, fmt.Errorf("stream reset: %v", f.ErrCode))
		case *http2.GoAwayFrame:
			c.fail(fmt.Errorf("server sent GOAWAY: %v", f.ErrCode))
			return
		}
		if err != nil {
			c.fail(err)
			return
		}
	}
}

// invoke makes one unary call and waits for its trailers; done is the caller's reusable
// channel (capacity 1).
func (c *h2conn) invoke(path string, message []byte, done chan error) error {
	call := &h2call{done: done}
	c.writeMu.Lock()
	c.mu.Lock()
	if c.broken != nil {
		c.mu.Unlock()
		c.writeMu.Unlock()
		return c.broken
	}
	id := c.nextID
	c.nextID += 2
	c.calls[id] = call
	c.mu.Unlock()
	c.headers.Reset()
	for _, field := range [...]hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path},
		{Name: ":authority", Value: c.authority},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
	} {
		_ = c.encoder.WriteField(field) // writes to a bytes.Buffer: cannot fail
	}
	err := c.framer.WriteHeaders(http2.HeadersFrameParam{
		StreamID: id, BlockFragment: c.headers.Bytes(), EndHeaders: true,
	})
	if err == nil {
		err = c.framer.WriteData(id, true, message)
	}
	if err == nil {
		err = c.writer.Flush()
	}
	c.writeMu.Unlock()
	if err != nil {
		c.fail(err)
	}
	return <-done
}

// grpcFrame is a message with gRPC's 5-byte prefix (not compressed, 4-byte length).
func grpcFrame(message []byte) []byte {
	out := make([]byte, 5+len(message))
	binary.BigEndian.PutUint32(out[1:5], uint32(len(message)))
	copy(out[5:], message)
	return out
}

func h2Caller(target string, ids []int, concurrency, conns int) (caller, func(), error) {
	clients := make([]*h2conn, conns)
	closeAll := func() {
		for _, c := range clients {
			if c != nil {
				c.conn.Close()
			}
		}
	}
	for i := range clients {
		c, err := dialH2(target)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		clients[i] = c
	}
	requests := make([][]byte, len(ids))
	for i, id := range ids {
		message, err := getSchemaRequest(id)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		requests[i] = grpcFrame(message)
	}
	dones := make([]chan error, concurrency)
	for n := range dones {
		dones[n] = make(chan error, 1)
	}
	call := func(n, index int) error {
		c := clients[n%conns]
		err := c.invoke(lockgatev1.SchemaRegistryService_GetSchema_FullMethodName, requests[index%len(requests)], dones[n])
		if err != nil && c.isBroken() {
			return fmt.Errorf("%w: %v", errConnectionGone, err)
		}
		return err
	}
	return call, closeAll, nil
}
