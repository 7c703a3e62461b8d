// Command latencygen is the load generator and the reader of bench/eos_throughput.py's
// latency run: records produced at a fixed rate into a pipeline's input topic, each timed
// until a read_committed consumer of its output sees it.
//
// It exists so that the run measures the copy and not its harness: on the 2-core machine the
// Python generator and reader it replaces used 0.34 of a core at 93,000 records/s and up to
// 0.78 at 150,000 (README, issue 13), cores the copy under test then lacked. This one does a
// few hundred nanoseconds of work a record.
//
//	latencygen produce -bootstrap B -topic T -partitions 4 -rate 100000 -records N -measured-from W -value-bytes 100
//	latencygen read -bootstrap B -topic T -partitions 4 -records N -measured-from W -settle 30s
//
// A record's value is its sequence number (10 digits), its produce time (16 digits,
// microseconds since the epoch, taken at the start of the burst it is produced in) and
// padding to -value-bytes; its key one of 1,000, its partition sequence mod -partitions.
// Records numbered below -measured-from are the warm-up's: produced at the same rate,
// reported apart.
//
// produce prints "measuring" on a line of its own when the first measured record is due
// (the caller starts its CPU counters then), and at the end one JSON line: how many it
// produced and the rate it kept from "measuring" until every record was acknowledged.
//
// read prints "ready" once it is connected and fetching, then reads until it has seen every
// record the caller names on its standard input (a line with a number: the records
// produced), or -settle after that line; a record's visibility time is when the poll that
// returned it did. It ends with one JSON line of latency percentiles, of the measured
// records and of the warm-up's apart, and the distinct and duplicate records it saw. A value
// that does not start with 10 digits (a marker) is skipped.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	sequenceDigits = 10
	stampDigits    = 16
	distinctKeys   = 1000
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: latencygen produce|read [flags]"))
	}
	var err error
	switch os.Args[1] {
	case "produce":
		err = produce(os.Args[2:])
	case "read":
		err = read(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want produce or read", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "latencygen:", err)
	os.Exit(1)
}

type common struct {
	bootstrap    string
	topic        string
	partitions   int
	records      int
	measuredFrom int
}

func (c *common) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&c.bootstrap, "bootstrap", "", "the broker, host:port")
	fs.StringVar(&c.topic, "topic", "", "the topic written (produce) or read (read)")
	fs.IntVar(&c.partitions, "partitions", 1, "the topic's partitions")
	fs.IntVar(&c.records, "records", 0, "records in all, the warm-up's included")
	fs.IntVar(&c.measuredFrom, "measured-from", 0, "the first measured record's sequence number")
	return fs
}

func (c *common) check() error {
	switch {
	case c.bootstrap == "" || c.topic == "":
		return errors.New("-bootstrap and -topic are required")
	case c.partitions < 1:
		return fmt.Errorf("-partitions %d: want at least 1", c.partitions)
	case c.records < 1 || c.measuredFrom < 0 || c.measuredFrom > c.records:
		return fmt.Errorf("-records %d -measured-from %d: want 0 <= measured-from <= records, records >= 1", c.records, c.measuredFrom)
	}
	return nil
}

type produced struct {
	Produced     int     `json:"produced"`
	MeasuredRate float64 `json:"measured_rate"`
	Errors       int64   `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
}

func produce(args []string) error {
	var c common
	var rate float64
	var valueBytes int
	fs := c.flags("produce")
	fs.Float64Var(&rate, "rate", 0, "records a second")
	fs.IntVar(&valueBytes, "value-bytes", 100, "each value's size (at least 26)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if rate <= 0 {
		return fmt.Errorf("-rate %v: want a positive records/s", rate)
	}
	client, err := kgo.NewClient(
		kgo.SeedBrokers(c.bootstrap),
		kgo.DefaultProduceTopic(c.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(100_000),
		// As the Python producers of the bench (librdkafka's default): franz-go's own is
		// snappy, which would cost this process and the broker more than the pipeline's input.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	)
	if err != nil {
		return err
	}
	defer client.Close()
	keys := make([][]byte, distinctKeys)
	for k := range keys {
		keys[k] = []byte(strconv.Itoa(k))
	}
	pad := []byte(strings.Repeat("x", max(0, valueBytes-sequenceDigits-stampDigits)))
	var failures atomic.Int64
	var firstError atomic.Value
	done := func(_ *kgo.Record, err error) {
		if err != nil && failures.Add(1) == 1 {
			firstError.Store(err.Error())
		}
	}
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	began := time.Now()
	measuring := began
	sent := 0
	for sent < c.records {
		due := min(c.records, int(time.Since(began).Seconds()*rate)+1)
		if sent <= c.measuredFrom && c.measuredFrom < due {
			measuring = time.Now()
			fmt.Fprintln(out, "measuring")
			out.Flush()
		}
		stamp := time.Now().UnixMicro()
		for ; sent < due; sent++ {
			value := make([]byte, 0, sequenceDigits+stampDigits+len(pad))
			value = appendDigits(value, int64(sent), sequenceDigits)
			value = appendDigits(value, stamp, stampDigits)
			value = append(value, pad...)
			client.Produce(ctx, &kgo.Record{
				Key:       keys[sent%distinctKeys],
				Value:     value,
				Partition: int32(sent % c.partitions),
			}, done)
		}
		time.Sleep(2 * time.Millisecond) // pacing: the next burst is due in a few milliseconds
	}
	if err := client.Flush(ctx); err != nil {
		return err
	}
	result := produced{Produced: sent, Errors: failures.Load()}
	if seconds := time.Since(measuring).Seconds(); seconds > 0 {
		result.MeasuredRate = float64(sent-c.measuredFrom) / seconds
	}
	if first, ok := firstError.Load().(string); ok {
		result.FirstError = first
	}
	return emit(out, result)
}

type visible struct {
	Records       int     `json:"records"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	MaxMs         float64 `json:"max_ms"`
	WarmupRecords int     `json:"warmup_records"`
	WarmupP99Ms   float64 `json:"warmup_p99_ms"`
	Distinct      int     `json:"distinct"`
	Duplicates    int     `json:"duplicates"`
	Skipped       int     `json:"skipped"`
}

func read(args []string) error {
	var c common
	var settle time.Duration
	fs := c.flags("read")
	fs.DurationVar(&settle, "settle", 30*time.Second, "how long past the caller's count records may take to show")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	offsets := make(map[int32]kgo.Offset, c.partitions)
	for p := range c.partitions {
		offsets[int32(p)] = kgo.NewOffset().AtStart()
	}
	client, err := kgo.NewClient(
		kgo.SeedBrokers(c.bootstrap),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.topic: offsets}),
		// librdkafka's default: a fetch with nothing committed to return waits at most this.
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx := context.Background()
	if err := client.Ping(ctx); err != nil {
		return fmt.Errorf("connecting to %s: %w", c.bootstrap, err)
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()

	// The caller's count of records produced, once it has one.
	expected := make(chan int, 1)
	go func() {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		n, convErr := strconv.Atoi(strings.TrimSpace(line))
		if err != nil || convErr != nil {
			n = c.records // standard input closed without a count: wait for them all
		}
		expected <- n
	}()

	seen := make([]bool, c.records)
	measured := make([]float64, 0, c.records-c.measuredFrom)
	warmup := make([]float64, 0, c.measuredFrom)
	var result visible
	want, deadline := -1, time.Time{}
	for want < 0 || (result.Distinct < want && time.Now().Before(deadline)) {
		select {
		case want = <-expected:
			deadline = time.Now().Add(settle)
		default:
		}
		poll, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fetches := client.PollFetches(poll)
		cancel()
		now := time.Now().UnixMicro()
		for _, fetchErr := range fetches.Errors() {
			if !errors.Is(fetchErr.Err, context.DeadlineExceeded) {
				return fmt.Errorf("fetching %s[%d]: %w", fetchErr.Topic, fetchErr.Partition, fetchErr.Err)
			}
		}
		var bad error
		fetches.EachRecord(func(r *kgo.Record) {
			sequence, stamp, ok := parse(r.Value)
			switch {
			case !ok:
				result.Skipped++
				return
			case sequence >= c.records:
				bad = fmt.Errorf("record %d read, but only %d were to be produced", sequence, c.records)
				return
			case seen[sequence]:
				result.Duplicates++
			default:
				seen[sequence] = true
				result.Distinct++
			}
			latency := float64(now-stamp) / 1000
			if sequence >= c.measuredFrom {
				measured = append(measured, latency)
			} else {
				warmup = append(warmup, latency)
			}
		})
		if bad != nil {
			return bad
		}
	}
	slices.Sort(measured)
	slices.Sort(warmup)
	result.Records = len(measured)
	result.P50Ms = percentile(measured, 0.50)
	result.P99Ms = percentile(measured, 0.99)
	result.MaxMs = percentile(measured, 1)
	result.WarmupRecords = len(warmup)
	result.WarmupP99Ms = percentile(warmup, 0.99)
	return emit(out, result)
}

// appendDigits appends n, zero-padded to width digits (fmt's %0*d without its cost a record).
func appendDigits(to []byte, n int64, width int) []byte {
	start := len(to)
	to = append(to, make([]byte, width)...)
	for i := len(to) - 1; i >= start; i-- {
		to[i] = byte('0' + n%10)
		n /= 10
	}
	return to
}

// parse reads a record value's sequence number and produce time; ok is false for a value
// that is not an input record.
func parse(value []byte) (sequence int, stampMicros int64, ok bool) {
	if len(value) < sequenceDigits+stampDigits {
		return 0, 0, false
	}
	sequence, err := strconv.Atoi(string(value[:sequenceDigits]))
	if err != nil || sequence < 0 {
		return 0, 0, false
	}
	stampMicros, err = strconv.ParseInt(string(value[sequenceDigits:sequenceDigits+stampDigits]), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return sequence, stampMicros, true
}

// percentile of sorted values, as the Python bench took it; -1 for none.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return -1
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func emit(out *bufio.Writer, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, string(line))
	return out.Flush()
}
