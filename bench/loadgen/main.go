// Command loadgen drives the schema registry's lookups by id over loopback and prints one
// JSON line: operations, errors, throughput and latency percentiles.
//
// It exists so that bench/schema_registry.py measures the server and not its client: a
// Python load generator spends about as much CPU per call as the Python server does, and on
// a 2-core machine the two fight for the same cores. This one spends a few microseconds.
//
//	loadgen -mode grpc -target 127.0.0.1:7090 -ids 1,2,3 -concurrency 16 -conns 8 -duration 5s
//	loadgen -mode http -target 127.0.0.1:8081 -ids 1,2,3 -concurrency 16 -duration 5s
//
// Requests are the Go client's generated messages (clients/go/gen/lockgate/v1, through a
// replace directive), encoded once up front. gRPC calls go out through a minimal HTTP/2
// client (h2grpc.go, the default, which sends the pre-encoded bytes and checks that an
// answer came) or, with -client grpc-go, through the generated SchemaRegistryService client
// on grpc-go, which decodes each answer and checks its schema id. HTTP requests are plain HTTP/1.1 GETs on one keep-alive connection per
// worker, written and parsed by hand for the same reason (net/http costs more CPU per call
// than the server being measured).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
)

// getSchemaRequest is GetSchemaRequest{schema_id: id} in the protobuf wire format.
func getSchemaRequest(id int) ([]byte, error) {
	return proto.Marshal(&lockgatev1.GetSchemaRequest{SchemaId: int32(id)})
}

type result struct {
	Mode        string  `json:"mode"`
	Client      string  `json:"client"`
	Operations  int     `json:"operations"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"per_second"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	P999Ms      float64 `json:"p999_ms"`
	MaxMs       float64 `json:"max_ms"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate,omitempty"`
	Conns       int     `json:"conns"`
	// ClientCPUSeconds is the CPU this load generator used (user + system), so the reader
	// can see how much of the machine it took from the server.
	ClientCPUSeconds float64 `json:"client_cpu_s"`
	// ServerCPUSeconds is the CPU the -pids processes used over the measured window.
	ServerCPUSeconds float64 `json:"server_cpu_s"`
}

// processCPU is the user + system CPU seconds the processes have used so far, from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func processCPU(pids []int) float64 {
	total := 0.0
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		text := string(data)
		fields := strings.Fields(text[strings.LastIndexByte(text, ')')+1:])
		if len(fields) < 13 {
			continue
		}
		user, _ := strconv.ParseFloat(fields[11], 64)
		system, _ := strconv.ParseFloat(fields[12], 64)
		total += (user + system) / 100
	}
	return total
}

// sampleServerCPU reads the processes' CPU at record and at stop; the difference arrives
// on the channel.
func sampleServerCPU(pids []int, record, stop time.Time) <-chan float64 {
	out := make(chan float64, 1)
	go func() {
		time.Sleep(time.Until(record))
		before := processCPU(pids)
		time.Sleep(time.Until(stop))
		out <- processCPU(pids) - before
	}()
	return out
}

// worker runs calls until stop, recording latencies only after record (warm-up first).
type worker struct {
	latencies []time.Duration
	errors    int
	firstErr  error
}

func (w *worker) note(err error, began time.Time, record time.Time) {
	if err != nil {
		w.errors++
		if w.firstErr == nil {
			w.firstErr = err
		}
		return
	}
	if !began.Before(record) {
		w.latencies = append(w.latencies, time.Since(began))
	}
}

// caller makes call number index from worker n (0 <= n < concurrency); it is safe for
// concurrent use by different workers.
type caller func(n, index int) error

func grpcGoCaller(target string, ids []int, conns int) (caller, func(), error) {
	clients := make([]lockgatev1.SchemaRegistryServiceClient, conns)
	connections := make([]*grpc.ClientConn, conns)
	closeAll := func() {
		for _, conn := range connections {
			if conn != nil {
				conn.Close()
			}
		}
	}
	for i := range clients {
		// One connection each: with SO_REUSEPORT the kernel spreads connections, not calls,
		// over the server's processes. WithNoProxy: a proxy would measure the proxy.
		conn, err := grpc.NewClient("passthrough:///"+target,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithNoProxy())
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conn.Connect()
		connections[i] = conn
		clients[i] = lockgatev1.NewSchemaRegistryServiceClient(conn)
	}
	requests := make([]*lockgatev1.GetSchemaRequest, len(ids))
	for i, id := range ids {
		requests[i] = &lockgatev1.GetSchemaRequest{SchemaId: int32(id)}
	}
	// One context for the whole run: a per-call deadline timer costs the client CPU.
	ctx := context.Background()
	call := func(n, index int) error {
		request := requests[index%len(requests)]
		response, err := clients[n%conns].GetSchema(ctx, request)
		if err == nil && response.GetSchema().GetSchemaId() != request.GetSchemaId() {
			err = fmt.Errorf("GetSchema(%d) answered schema %d", request.GetSchemaId(), response.GetSchema().GetSchemaId())
		}
		return err
	}
	return call, closeAll, nil
}

// httpConn is one keep-alive HTTP/1.1 connection.
type httpConn struct {
	conn   net.Conn
	reader *bufio.Reader
}

// errConnectionGone marks an error after which a connection is of no further use.
var errConnectionGone = errors.New("connection gone")

func (c *httpConn) get(request []byte) error {
	if _, err := c.conn.Write(request); err != nil {
		return fmt.Errorf("%w: %v", errConnectionGone, err)
	}
	status, err := c.reader.ReadString('\n')
	if err != nil {
		return fmt.Errorf("%w: %v", errConnectionGone, err)
	}
	length := -1
	for {
		line, err := c.reader.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		name, value, found := strings.Cut(line, ":")
		if found && strings.EqualFold(strings.TrimSpace(name), "content-length") {
			length, err = strconv.Atoi(strings.TrimSpace(value))
			if err != nil {
				return fmt.Errorf("bad content-length %q", value)
			}
		}
	}
	if length < 0 {
		return errors.New("response without content-length")
	}
	if _, err := c.reader.Discard(length); err != nil {
		return err
	}
	if !strings.HasPrefix(status, "HTTP/1.1 200") {
		return fmt.Errorf("lookup answered %q", strings.TrimSpace(status))
	}
	return nil
}

func httpCaller(target string, ids []int, concurrency int) (caller, func(), error) {
	requests := make([][]byte, len(ids))
	for i, id := range ids {
		requests[i] = []byte(fmt.Sprintf("GET /schemas/ids/%d HTTP/1.1\r\nHost: %s\r\n\r\n", id, target))
	}
	connections := make([]*httpConn, concurrency)
	closeAll := func() {
		for _, c := range connections {
			if c != nil {
				c.conn.Close()
			}
		}
	}
	for n := range connections {
		conn, err := net.Dial("tcp", target)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		connections[n] = &httpConn{conn: conn, reader: bufio.NewReaderSize(conn, 64*1024)}
	}
	call := func(n, index int) error {
		return connections[n].get(requests[index%len(requests)])
	}
	return call, closeAll, nil
}

// closedLoop runs concurrency workers, each making its next call as soon as the previous
// one answers: the throughput the server sustains, at the latency that load costs.
func closedLoop(call caller, concurrency int, record, stop time.Time) []*worker {
	workers := make([]*worker, concurrency)
	var wg sync.WaitGroup
	for n := range workers {
		w := &worker{}
		workers[n] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for index := n * 7; ; index++ {
				began := time.Now()
				if !began.Before(stop) {
					return
				}
				err := call(n, index)
				w.note(err, began, record)
				if errors.Is(err, errConnectionGone) {
					return // do not spin on a dead connection
				}
			}
		}()
	}
	wg.Wait()
	return workers
}

// openLoop starts calls at a fixed rate whatever the answers do (up to concurrency in
// flight) and times each from when it was due, not from when a worker got to it, so a
// server falling behind shows as latency instead of being hidden ("coordinated omission").
func openLoop(call caller, concurrency int, rate float64, record, stop time.Time) []*worker {
	type job struct {
		index int
		due   time.Time
	}
	jobs := make(chan job, 1<<16)
	go func() {
		defer close(jobs)
		start := time.Now()
		interval := time.Duration(float64(time.Second) / rate)
		// Wake at most every 250 us and release every call due by then: a wake-up per call
		// would cost this process more CPU than the calls themselves. Latency still counts
		// from each call's own due time.
		const tick = 250 * time.Microsecond
		index := 0
		for {
			now := time.Now()
			for {
				due := start.Add(time.Duration(index) * interval)
				if !due.Before(stop) {
					return
				}
				if due.After(now) {
					break
				}
				jobs <- job{index: index, due: due}
				index++
			}
			wait := time.Until(start.Add(time.Duration(index) * interval))
			time.Sleep(max(wait, tick))
		}
	}()
	workers := make([]*worker, concurrency)
	var wg sync.WaitGroup
	for n := range workers {
		w := &worker{}
		workers[n] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				w.note(call(n, j.index), j.due, record)
			}
		}()
	}
	wg.Wait()
	return workers
}

func parseIDs(flagName, text string) ([]int, error) {
	var ids []int
	for _, part := range strings.Split(text, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, err := strconv.Atoi(part)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("-%s: %q is not a positive integer", flagName, part)
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("-%s: give at least one, e.g. -%s 1,2,3", flagName, flagName)
	}
	return ids, nil
}

func percentile(sorted []time.Duration, fraction float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	index := int(fraction * float64(len(sorted)))
	if index >= len(sorted) {
		index = len(sorted) - 1
	}
	return float64(sorted[index].Microseconds()) / 1000
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

func main() {
	mode := flag.String("mode", "grpc", "grpc (GetSchema) or http (GET /schemas/ids/{id})")
	target := flag.String("target", "", "server HOST:PORT")
	idsText := flag.String("ids", "", "comma-separated schema ids to look up, in turn")
	concurrency := flag.Int("concurrency", 16, "calls in flight")
	conns := flag.Int("conns", 8, "gRPC connections the calls are spread over (http: one per call in flight)")
	client := flag.String("client", "h2", "gRPC client: h2 (minimal, cheap on CPU) or grpc-go")
	duration := flag.Duration("duration", 5*time.Second, "measured time")
	rate := flag.Float64("rate", 0, "calls per second started on schedule (open loop, at most -concurrency in flight); 0: closed loop, each worker calls again as soon as answered")
	warmup := flag.Duration("warmup", 500*time.Millisecond, "unmeasured time before it")
	pidsText := flag.String("pids", "", "comma-separated server process ids whose CPU to report over the measured window")
	flag.Parse()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	if *target == "" {
		fail(errors.New("-target HOST:PORT is required"))
	}
	ids, err := parseIDs("ids", *idsText)
	if err != nil {
		fail(err)
	}
	var pids []int
	if *pidsText != "" {
		if pids, err = parseIDs("pids", *pidsText); err != nil {
			fail(err)
		}
	}
	if *concurrency < 1 || *conns < 1 || *rate < 0 {
		fail(errors.New("-concurrency and -conns must be at least 1, -rate at least 0"))
	}
	var call caller
	var closeAll func()
	switch *mode {
	case "grpc":
		switch *client {
		case "h2":
			call, closeAll, err = h2Caller(*target, ids, *concurrency, *conns)
		case "grpc-go":
			call, closeAll, err = grpcGoCaller(*target, ids, *conns)
		default:
			err = fmt.Errorf("-client %q: use h2 or grpc-go", *client)
		}
	case "http":
		*conns = *concurrency
		call, closeAll, err = httpCaller(*target, ids, *concurrency)
	default:
		err = fmt.Errorf("-mode %q: use grpc or http", *mode)
	}
	if err != nil {
		fail(err)
	}
	defer closeAll()
	// The clock starts once the connections are open.
	record := time.Now().Add(*warmup)
	stop := record.Add(*duration)
	serverCPU := sampleServerCPU(pids, record, stop)
	var workers []*worker
	if *rate > 0 {
		workers = openLoop(call, *concurrency, *rate, record, stop)
	} else {
		workers = closedLoop(call, *concurrency, record, stop)
	}
	elapsed := time.Since(record).Seconds()
	var all []time.Duration
	out := result{Mode: *mode, Client: *client, Seconds: elapsed, Concurrency: *concurrency, Conns: *conns, Rate: *rate}
	if *mode == "http" {
		out.Client = "http1"
	}
	for _, w := range workers {
		all = append(all, w.latencies...)
		out.Errors += w.errors
		if w.firstErr != nil && out.FirstError == "" {
			out.FirstError = w.firstErr.Error()
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	out.Operations = len(all)
	out.PerSecond = float64(len(all)) / elapsed
	out.P50Ms = percentile(all, 0.50)
	out.P99Ms = percentile(all, 0.99)
	out.P999Ms = percentile(all, 0.999)
	out.MaxMs = percentile(all, 1.0)
	out.ClientCPUSeconds = cpuSeconds()
	out.ServerCPUSeconds = <-serverCPU
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}
