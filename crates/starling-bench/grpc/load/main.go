// grpc-load: a lean closed-loop gRPC load generator for run-grpc-bench.sh.
//
//	grpc-load -addr 127.0.0.1:PORT -method /bsky.Service/GetTimeline -data FILE -c 32 \
//	          [-connections 1] [-duration 30s] [-timeout 5s] [-http1] [-expect FILE]
//	          [-answers FILE] [-percentiles FILE]
//
// ghz builds every request from JSON through protobuf reflection and spends ~70 µs of CPU per
// call, which on a 2-core machine shared with the server caps what it can measure. This tool
// sends request messages that are already encoded (FILE: each message as a little-endian u32
// length and its protobuf bytes, written by `grpc-requests`), round-robin over the file, through
// grpc-go with a pass-through codec, so the client does no message work at all. C workers each
// keep one call in flight, sharing CONNECTIONS HTTP/2 connections; a worker starts no call
// after the duration ends, so no call is cut off. Prints one `grpc_load:` line of key=value
// pairs (latencies in milliseconds; response bytes are the mean encoded response size).
//
// -http1 is for servers without HTTP/2, such as the reference dataplane of @atproto/bsky
// (express over node:http): each call is a Connect-protocol unary request over HTTP/1.1
// (`POST /pkg.Service/Method`, `Content-Type: application/proto`, the bare message as the
// body, the bare response message back with status 200, a JSON error otherwise). HTTP/1.1 has
// one call in flight per connection, so each worker then keeps its own keep-alive connection
// and -connections is ignored. The default mode (gRPC over h2c) is unchanged.
//
// -expect FILE checks every OK response's size: line i of FILE (`FIELD KIND COUNT`, written by
// `compare-requests` beside the messages) says how many elements the response to message i
// holds in its top-level field FIELD, counting messages (KIND `m`) or the values of a packed
// repeated integer (KIND `p`). A response that differs counts as the code `WrongCount`, not OK.
// -answers FILE checks every OK response's content: line i of FILE is the hex SHA-256 of the
// exact bytes the response to message i must have (written by compare/content.mjs from answers
// it checked against the data); `unordered HEX` when the digest is of the response with the
// fields of each element of its field 1 sorted (an answer whose order no query fixes, such as
// the reference's known followers in GetFollowsFollowing); or `-` when no answer to message i
// was verified right. A response whose digest differs (and any response to a `-` message)
// counts as the code `WrongAnswer`, not OK; `answers_checked` counts the responses compared.
// The digest costs about a microsecond per kilobyte of response, on the client's side only.
// Both checks report the first wrong message on stderr, and count as errors.
// -percentiles FILE writes the latency distribution, one `QUANTILE MILLISECONDS` line per
// permille (and the top 0.1% per 1/10,000), for charts.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"starling/bench/grpc-load/wire"
)

// connectCodes maps the Connect protocol's error codes to gRPC's, so that both modes report
// the same code names.
var connectCodes = map[string]codes.Code{
	"canceled": codes.Canceled, "unknown": codes.Unknown, "invalid_argument": codes.InvalidArgument,
	"deadline_exceeded": codes.DeadlineExceeded, "not_found": codes.NotFound,
	"already_exists": codes.AlreadyExists, "permission_denied": codes.PermissionDenied,
	"resource_exhausted": codes.ResourceExhausted, "failed_precondition": codes.FailedPrecondition,
	"aborted": codes.Aborted, "out_of_range": codes.OutOfRange, "unimplemented": codes.Unimplemented,
	"internal": codes.Internal, "unavailable": codes.Unavailable, "data_loss": codes.DataLoss,
	"unauthenticated": codes.Unauthenticated,
}

// connectInvoke makes one Connect-protocol unary call over HTTP/1.1 and returns the response
// message and the call's status code.
func connectInvoke(ctx context.Context, client *http.Client, url string, timeout time.Duration, msg []byte, response *[]byte) codes.Code {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(msg))
	if err != nil {
		return codes.Internal
	}
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", strconv.FormatInt(timeout.Milliseconds(), 10))
	res, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return codes.DeadlineExceeded
		}
		return codes.Unavailable
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return codes.Unavailable
	}
	if res.StatusCode != http.StatusOK {
		var connectErr struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(body, &connectErr) == nil {
			if code, ok := connectCodes[connectErr.Code]; ok {
				return code
			}
		}
		return codes.Unknown
	}
	*response = append((*response)[:0], body...)
	return codes.OK
}

// expectation is one request's expected response size.
type expectation struct {
	field  uint64
	packed bool
	count  int
}

func readExpectations(path string) ([]expectation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res []expectation
	for n, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e expectation
		var kind string
		if _, err := fmt.Sscanf(line, "%d %s %d", &e.field, &kind, &e.count); err != nil || (kind != "m" && kind != "p") {
			return nil, fmt.Errorf("%s:%d: not `FIELD m|p COUNT`: %q", path, n+1, line)
		}
		e.packed = kind == "p"
		res = append(res, e)
	}
	return res, nil
}

// countField counts the elements of top-level field `field` in a protobuf message, or -1 if
// the message does not parse.
func countField(msg []byte, field uint64, packed bool) int {
	count := 0
	for len(msg) > 0 {
		key, n := binary.Uvarint(msg)
		if n <= 0 {
			return -1
		}
		msg = msg[n:]
		var value []byte
		switch key & 7 {
		case 0:
			_, n = binary.Uvarint(msg)
			if n <= 0 {
				return -1
			}
			msg = msg[n:]
			if key>>3 == field {
				count++
			}
			continue
		case 1:
			if len(msg) < 8 {
				return -1
			}
			msg = msg[8:]
			continue
		case 5:
			if len(msg) < 4 {
				return -1
			}
			msg = msg[4:]
			continue
		case 2:
			size, n := binary.Uvarint(msg)
			if n <= 0 || uint64(len(msg)-n) < size {
				return -1
			}
			value = msg[n : n+int(size)]
			msg = msg[n+int(size):]
		default:
			return -1
		}
		if key>>3 != field {
			continue
		}
		if !packed {
			count++
			continue
		}
		for len(value) > 0 {
			_, n := binary.Uvarint(value)
			if n <= 0 {
				return -1
			}
			value = value[n:]
			count++
		}
	}
	return count
}

type workerResult struct {
	latencies     []time.Duration
	codes         map[string]int
	responseBytes int64
	// Responses compared with their expected digest.
	answersChecked int64
	// The first wrong response (size or content), described.
	firstWrong string
}

// checks are what every OK response is held to; either may be nil.
type checks struct {
	expectations []expectation
	answers      []wire.Answer
}

// judge returns the code a wrong OK response to message idx counts as and why it is wrong, or
// "" when it is right; answerChecked says whether its digest was compared.
func (c *checks) judge(idx uint64, response []byte) (code, why string, answerChecked bool) {
	if c.expectations != nil {
		e := c.expectations[idx]
		if got := countField(response, e.field, e.packed); got != e.count {
			return "WrongCount", fmt.Sprintf("message %d: field %d holds %d, expected %d", idx, e.field, got, e.count), false
		}
	}
	if c.answers == nil {
		return "", "", false
	}
	want := &c.answers[idx]
	if !want.Known {
		return "WrongAnswer", fmt.Sprintf("message %d: no verified answer (`-`)", idx), true
	}
	if right, got := want.Check(response); !right {
		return "WrongAnswer", fmt.Sprintf("message %d: answer sha256 %x, expected %x", idx, got[:8], want.Digest[:8]), true
	}
	return "", "", true
}

func main() {
	addr := flag.String("addr", "", "host:port of the h2c gRPC server")
	method := flag.String("method", "", "full method name, /package.Service/Method")
	dataPath := flag.String("data", "", "file of length-prefixed encoded request messages")
	concurrency := flag.Int("c", 8, "calls in flight (workers)")
	connections := flag.Int("connections", 1, "HTTP/2 connections the workers share")
	duration := flag.Duration("duration", 30*time.Second, "how long to start calls")
	timeout := flag.Duration("timeout", 5*time.Second, "deadline of each call")
	expectPath := flag.String("expect", "", "expected response sizes, one line per message (see above)")
	answersPath := flag.String("answers", "", "expected response digests, one line per message (see above)")
	percentilesPath := flag.String("percentiles", "", "where to write the latency distribution")
	http1 := flag.Bool("http1", false, "Connect protocol over HTTP/1.1 instead of gRPC over h2c (one connection per worker)")
	flag.Parse()
	if *addr == "" || *method == "" || *dataPath == "" || *concurrency < 1 || *connections < 1 {
		fmt.Fprintln(os.Stderr, "usage: grpc-load -addr HOST:PORT -method /pkg.Service/Method -data FILE -c N [-connections N] [-duration D] [-http1]")
		os.Exit(2)
	}
	messages, err := wire.ReadMessages(*dataPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpc-load:", err)
		os.Exit(1)
	}
	var expectations []expectation
	if *expectPath != "" {
		if expectations, err = readExpectations(*expectPath); err != nil {
			fmt.Fprintln(os.Stderr, "grpc-load:", err)
			os.Exit(1)
		}
		if len(expectations) != len(messages) {
			fmt.Fprintf(os.Stderr, "grpc-load: %s has %d lines for %d messages\n", *expectPath, len(expectations), len(messages))
			os.Exit(1)
		}
	}
	var answers []wire.Answer
	if *answersPath != "" {
		if answers, err = wire.ReadAnswers(*answersPath); err != nil {
			fmt.Fprintln(os.Stderr, "grpc-load:", err)
			os.Exit(1)
		}
		if len(answers) != len(messages) {
			fmt.Fprintf(os.Stderr, "grpc-load: %s has %d lines for %d messages\n", *answersPath, len(answers), len(messages))
			os.Exit(1)
		}
	}
	check := checks{expectations: expectations, answers: answers}
	if *http1 {
		*connections = *concurrency
	}
	httpClient := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        *concurrency,
		MaxIdleConnsPerHost: *concurrency,
		MaxConnsPerHost:     *concurrency,
		DisableCompression:  true,
	}}
	conns := make([]*grpc.ClientConn, *connections)
	for i := range conns {
		if *http1 {
			break
		}
		conn, err := grpc.NewClient(*addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(wire.RawCodec{})))
		if err != nil {
			fmt.Fprintln(os.Stderr, "grpc-load: dialing", *addr+":", err)
			os.Exit(1)
		}
		defer conn.Close()
		conns[i] = conn
	}

	var next atomic.Uint64
	results := make([]workerResult, *concurrency)
	var wg sync.WaitGroup
	started := time.Now()
	deadline := started.Add(*duration)
	for w := 0; w < *concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			conn := conns[w%len(conns)]
			url := "http://" + *addr + *method
			res := workerResult{codes: map[string]int{}}
			var response []byte
			for time.Now().Before(deadline) {
				idx := (next.Add(1) - 1) % uint64(len(messages))
				msg := messages[idx]
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				t0 := time.Now()
				var code codes.Code
				if *http1 {
					code = connectInvoke(ctx, httpClient, url, *timeout, msg, &response)
				} else {
					code = status.Code(conn.Invoke(ctx, *method, msg, &response))
				}
				elapsed := time.Since(t0)
				cancel()
				res.latencies = append(res.latencies, elapsed)
				if code == codes.OK {
					wrong, why, answerChecked := check.judge(idx, response)
					if answerChecked {
						res.answersChecked++
					}
					if wrong != "" {
						res.codes[wrong]++
						if res.firstWrong == "" {
							res.firstWrong = why
						}
						continue
					}
				}
				res.codes[code.String()]++
				if code == codes.OK {
					res.responseBytes += int64(len(response))
				}
			}
			results[w] = res
		}(w)
	}
	wg.Wait()
	seconds := time.Since(started).Seconds()

	var all []time.Duration
	codes := map[string]int{}
	var responseBytes, answersChecked int64
	for _, res := range results {
		if res.firstWrong != "" {
			fmt.Fprintln(os.Stderr, "grpc-load: wrong response:", res.firstWrong)
		}
		answersChecked += res.answersChecked
		all = append(all, res.latencies...)
		for code, n := range res.codes {
			codes[code] += n
		}
		responseBytes += res.responseBytes
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	ms := func(q float64) float64 {
		if len(all) == 0 {
			return 0
		}
		idx := int(q * float64(len(all)))
		if idx >= len(all) {
			idx = len(all) - 1
		}
		return float64(all[idx].Microseconds()) / 1000
	}
	var names []string
	for code := range codes {
		names = append(names, code)
	}
	sort.Strings(names)
	var parts []string
	for _, code := range names {
		parts = append(parts, fmt.Sprintf("%s:%d", code, codes[code]))
	}
	ok := codes["OK"]
	meanBytes := 0.0
	if ok > 0 {
		meanBytes = float64(responseBytes) / float64(ok)
	}
	if *percentilesPath != "" {
		var out strings.Builder
		for q := 0; q < 999; q++ {
			fmt.Fprintf(&out, "%.4f %.3f\n", float64(q)/1000, ms(float64(q)/1000))
		}
		for q := 9990; q <= 10000; q++ {
			fmt.Fprintf(&out, "%.4f %.3f\n", float64(q)/10000, ms(float64(q)/10000))
		}
		if err := os.WriteFile(*percentilesPath, []byte(out.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "grpc-load:", err)
			os.Exit(1)
		}
	}
	fmt.Printf("grpc_load: method=%s c=%d connections=%d requests=%d seconds=%.2f rps=%.0f "+
		"p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f ok=%d errors=%d codes=%s response_bytes_mean=%.0f answers_checked=%d\n",
		*method, *concurrency, *connections, len(all), seconds, float64(len(all))/seconds,
		ms(0.50), ms(0.90), ms(0.99), ms(0.999), ms(1.0), ok, len(all)-ok,
		strings.Join(parts, ","), meanBytes, answersChecked)
}
