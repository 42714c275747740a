// The harness: doze_kafka.py as a child process with --control, and a small
// client of its control endpoint (JSON over HTTP, a bearer token). One doze
// serves the whole `go test` run; every test starts with POST /control/reset
// (a fresh empty broker on the same ports), so no test sees another's topics,
// transactional ids, groups, faults or clock.
package dozetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// testTimeout bounds each test (its context); `go test -timeout` bounds the run.
const testTimeout = 60 * time.Second

var doze *Doze

func TestMain(m *testing.M) {
	var err error
	if doze, err = StartDoze(); err != nil {
		fmt.Fprintln(os.Stderr, "doze did not start:", err)
		os.Exit(2)
	}
	code := m.Run()
	if err := doze.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "doze did not stop cleanly:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Doze is a running `python3 doze_kafka.py --control`.
type Doze struct {
	cmd       *exec.Cmd
	dir       string // its data directory's parent, and its stderr's file
	Bootstrap string // host:port of its Kafka listener
	Control   string // http://127.0.0.1:CPORT/control
	token     string
	http      *http.Client
}

// dozePath: doze_kafka.py, three folders up from this file.
func dozePath() string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "..", "..", "doze_kafka.py")
}

var (
	listeningLine = regexp.MustCompile(`^doze-kafka \S+ listening on (\S+) \(data in .*\)$`)
	controlLine   = regexp.MustCompile(`^control: (http://\S+/control) \(Authorization: Bearer (\S+)\)$`)
)

// StartDoze runs doze on ephemeral ports with a random token, and reads the
// three lines it prints on stdout once it serves.
func StartDoze() (*Doze, error) {
	dir, err := os.MkdirTemp("", "doze-go-")
	if err != nil {
		return nil, err
	}
	stderr, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("python3", dozePath(), "--port", "0", "--data-dir", filepath.Join(dir, "data"),
		"--console", "127.0.0.1:0", "--control")
	cmd.Stderr = stderr
	// If this test binary dies (go test's -timeout, a panic), doze dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &Doze{cmd: cmd, dir: dir, http: &http.Client{Timeout: 10 * time.Second}}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(30 * time.Second)
	for d.Control == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				cmd.Wait()
				return nil, fmt.Errorf("doze exited before its control line: %s", d.stderrTail(0))
			}
			if m := listeningLine.FindStringSubmatch(line); m != nil {
				d.Bootstrap = m[1]
			} else if m := controlLine.FindStringSubmatch(line); m != nil {
				d.Control, d.token = m[1], m[2]
			}
		case <-deadline:
			cmd.Process.Kill()
			return nil, fmt.Errorf("no control line within 30 s: %s", d.stderrTail(0))
		}
	}
	go func() { // whatever else doze prints on stdout: read, so that it never blocks
		for range lines {
		}
	}()
	if d.Bootstrap == "" {
		return nil, fmt.Errorf("no listening line before the control line")
	}
	return d, nil
}

// Stop: SIGTERM, as a person's Ctrl-C; doze stops its broker cleanly and exits 0.
func (d *Doze) Stop() error {
	defer os.RemoveAll(d.dir)
	d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(15 * time.Second):
		d.cmd.Process.Kill()
		return fmt.Errorf("still running 15 s after SIGTERM: killed")
	}
}

// stderrSize and stderrTail: doze's log, to show what it said during a failed test.
func (d *Doze) stderrSize() int64 {
	info, err := os.Stat(filepath.Join(d.dir, "stderr.log"))
	if err != nil {
		return 0
	}
	return info.Size()
}

func (d *Doze) stderrTail(from int64) string {
	data, _ := os.ReadFile(filepath.Join(d.dir, "stderr.log"))
	if from > int64(len(data)) {
		from = 0
	}
	data = data[from:]
	if len(data) > 8000 {
		data = data[len(data)-8000:]
	}
	return string(data)
}

// --- the control endpoint ---

// Call sends one request (body: nil or a value to send as JSON) and decodes
// the JSON answer into out (when not nil) -> the HTTP status.
func (d *Doze) Call(method, path string, body, out any) (int, error) {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(d.Control, "/control")+path, reader)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+d.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %d %q: %w", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode, nil
}

// must: Call, failing the test unless the status is the one expected.
func (d *Doze) must(t testing.TB, want int, method, path string, body, out any) {
	t.Helper()
	var raw json.RawMessage
	status, err := d.Call(method, path, body, &raw)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if status != want {
		t.Fatalf("%s %s: %d %s (wanted %d)", method, path, status, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, path, raw, err)
		}
	}
}

// Summary is GET /control.
type Summary struct {
	Faults        []map[string]any `json:"faults"`
	ClockOffsetMs int64            `json:"clock_offset_ms"`
	Starts        int              `json:"starts"`
	Bootstrap     string           `json:"bootstrap"`
	DataDir       string           `json:"data_dir"`
}

func (d *Doze) Summary(t testing.TB) Summary {
	t.Helper()
	var s Summary
	d.must(t, 200, "GET", "/control", nil, &s)
	return s
}

// Fault adds a rule (POST /control/faults) -> its id.
func (d *Doze) Fault(t testing.TB, rule map[string]any) int {
	t.Helper()
	var got struct {
		ID int `json:"id"`
	}
	d.must(t, 201, "POST", "/control/faults", rule, &got)
	return got.ID
}

// Faults: the rules not yet used up (GET /control/faults).
func (d *Doze) Faults(t testing.TB) []map[string]any {
	t.Helper()
	var got struct {
		Faults []map[string]any `json:"faults"`
	}
	d.must(t, 200, "GET", "/control/faults", nil, &got)
	return got.Faults
}

// Advance moves the broker's clock ms forward (timers that came due run).
func (d *Doze) Advance(t testing.TB, ms int64) {
	t.Helper()
	d.must(t, 200, "POST", "/control/advance", map[string]any{"ms": ms}, nil)
}

// Restart (how: clean, kill, power_cut) or, with how "", Reset; either way,
// wait until the new broker answers with one more start.
func (d *Doze) Restart(t testing.TB, how string) Summary {
	t.Helper()
	var asked struct {
		Starts int `json:"starts"`
	}
	if how == "" {
		d.must(t, 202, "POST", "/control/reset", nil, &asked)
	} else {
		d.must(t, 202, "POST", "/control/restart", map[string]any{"how": how}, &asked)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var s Summary
		if status, err := d.Call("GET", "/control", nil, &s); err == nil && status == 200 && s.Starts >= asked.Starts {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("doze did not come back with %d starts within 20 s", asked.Starts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Item is a row of GET /control/records: a record or a marker.
type Item struct {
	Kind       string  `json:"kind"` // "record" or "marker"
	Offset     int64   `json:"offset"`
	KeyB64     *string `json:"key_b64"`
	ValueB64   *string `json:"value_b64"`
	Control    string  `json:"control"` // a marker's COMMIT or ABORT
	ProducerID int64   `json:"producer_id"`
	TxnStatus  string  `json:"txn_status"`
}

func (i Item) Value() string {
	if i.ValueB64 == nil {
		return "<null>"
	}
	v, _ := base64.StdEncoding.DecodeString(*i.ValueB64)
	return string(v)
}

// Records: a partition's rows in a view (committed, uncommitted, log), every
// page of them (a page holds at most 500 rows; the next starts at next_offset;
// the committed view ends at the last stable offset, as read_committed does).
func (d *Doze) Records(t testing.TB, topic string, partition int, view string) []Item {
	t.Helper()
	var items []Item
	offset := "earliest"
	for {
		var page struct {
			Items            []Item `json:"items"`
			NextOffset       *int64 `json:"next_offset"`
			LastStableOffset int64  `json:"last_stable_offset"`
		}
		d.must(t, 200, "GET", fmt.Sprintf("/control/records?topic=%s&partition=%d&view=%s&offset=%s",
			url.QueryEscape(topic), partition, view, offset), nil, &page)
		for _, item := range page.Items {
			if item.Kind != "line" { // the HW and LSO lines the console draws between rows
				items = append(items, item)
			}
		}
		next := page.NextOffset
		if next == nil || fmt.Sprint(*next) == offset || view == "committed" && *next >= page.LastStableOffset {
			return items
		}
		offset = fmt.Sprint(*next)
	}
}

// Values: the values of the records (not the markers) of a view.
func (d *Doze) Values(t testing.TB, topic string, partition int, view string) []string {
	t.Helper()
	values := []string{}
	for _, item := range d.Records(t, topic, partition, view) {
		if item.Kind == "record" {
			values = append(values, item.Value())
		}
	}
	return values
}

// Markers: the COMMIT/ABORT markers of a partition's log, in order.
func (d *Doze) Markers(t testing.TB, topic string, partition int) []string {
	t.Helper()
	markers := []string{}
	for _, item := range d.Records(t, topic, partition, "log") {
		if item.Kind == "marker" {
			markers = append(markers, item.Control)
		}
	}
	return markers
}

// Transaction: GET /control/transactions?id= (nil: doze knows no such id).
func (d *Doze) Transaction(t testing.TB, id string) map[string]any {
	t.Helper()
	var got map[string]any
	status, err := d.Call("GET", "/control/transactions?id="+url.QueryEscape(id), nil, &got)
	if err != nil {
		t.Fatalf("GET /control/transactions?id=%s: %v", id, err)
	}
	if status == 404 {
		return nil
	}
	if status != 200 {
		t.Fatalf("GET /control/transactions?id=%s: %d %v", id, status, got)
	}
	return got
}

// Committed: a group's committed offsets (GET /control/committed?group=).
func (d *Doze) Committed(t testing.TB, group string) []map[string]any {
	t.Helper()
	var got struct {
		Offsets []map[string]any `json:"offsets"`
	}
	d.must(t, 200, "GET", "/control/committed?group="+url.QueryEscape(group), nil, &got)
	return got.Offsets
}

// --- what every test does ---

// begin: a fresh broker (reset), a context bounding the test, and doze's log
// of the test shown if it fails.
func begin(t *testing.T) context.Context {
	t.Helper()
	doze.Restart(t, "")
	from := doze.stderrSize()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(func() {
		cancel()
		if t.Failed() {
			said := doze.stderrTail(from)
			if said == "" {
				said = "(nothing)"
			}
			t.Logf("doze's log during the test:\n%s", said)
		}
	})
	return ctx
}

// client: a franz-go client of this doze, closed when the test ends.
func client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(doze.Bootstrap)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// createTopic through Kafka's CreateTopics (kadm), as an application would.
func createTopic(t *testing.T, ctx context.Context, topic string, partitions int32) {
	t.Helper()
	adm := kadm.NewClient(client(t))
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// waitFor polls check until it is true, failing the test after the context's deadline.
func waitFor(t *testing.T, ctx context.Context, what string, check func() bool) {
	t.Helper()
	for !check() {
		select {
		case <-ctx.Done():
			t.Fatalf("waited in vain for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
