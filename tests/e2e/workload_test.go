//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// phpListenPort is the node-local TCP listener the workload connects to,
// as a PHP site connects to its database.
const phpListenPort = 35306

// phpWorkload is what a tenant's PHP cron job does (Laravel's scheduler,
// WP-CLI, Composer): each step prints a marker the test looks for in the
// journal, and a failed step exits 1 with the reason on stderr.
const phpWorkload = `<?php
function fail($m) { fwrite(STDERR, "FAIL $m\n"); exit(1); }
function step($m) { echo "STEP $m\n"; }

// 1. opcache with the tracing JIT: a loop hot enough to be compiled.
function hot($n) { $s = 0; for ($i = 0; $i < $n; $i++) { $s += ($i * 7) % 13; } return $s; }
$sum = 0;
for ($k = 0; $k < 20; $k++) { $sum += hot(200000); }
if (!function_exists('opcache_get_status')) fail('opcache not loaded');
$st = opcache_get_status(false);
if (!$st || empty($st['jit'])) fail('no opcache status: ' . var_export($st, true));
$jit = $st['jit'];
$used = $jit['buffer_size'] - $jit['buffer_free'];
if (!$jit['enabled'] || !$jit['on']) fail('JIT not on: ' . var_export($jit, true));
if ($used <= 0) fail('JIT buffer unused: ' . var_export($jit, true));
step("jit on=1 kind={$jit['kind']} buffer_used=$used sum=$sum");

// 2. files in the webroot (the working directory)
$f = 'php-workload-' . getmypid() . '.txt';
if (file_put_contents($f, "cache entry\n") === false) fail("write $f in " . getcwd());
if (file_get_contents($f) !== "cache entry\n") fail("read $f back");
if (!rename($f, "$f.2") || !unlink("$f.2")) fail("rename/unlink $f");
step('webroot ' . getcwd());

// 3. /tmp (private to the unit)
$t = tempnam(sys_get_temp_dir(), 'hc');
if ($t === false || file_put_contents($t, str_repeat('x', 1 << 20)) !== 1 << 20) fail('write in ' . sys_get_temp_dir());
if (filesize($t) !== 1 << 20) fail('tmp size');
unlink($t);
step('tmp ' . sys_get_temp_dir());

// 4. subprocesses: proc_open and exec of a shell pipeline
$p = proc_open('printf "a\nb\nc\n" | wc -l', [1 => ['pipe', 'w']], $pipes);
if (!is_resource($p)) fail('proc_open');
$out = trim(stream_get_contents($pipes[1])); fclose($pipes[1]);
if (proc_close($p) !== 0 || $out !== '3') fail("proc_open pipeline gave '$out'");
exec('echo hello | tr a-z A-Z', $lines, $rc);
if ($rc !== 0 || $lines !== ['HELLO']) fail('exec pipeline: ' . var_export($lines, true));
step('proc_open+exec');

// 5. name resolution
$ip = gethostbyname('localhost');
if ($ip !== '127.0.0.1') fail("gethostbyname(localhost) = $ip");
step("dns localhost=$ip");

// 6. TCP to a local service, as to a database
$s = @fsockopen('127.0.0.1', PORT, $errno, $errstr, 5);
if (!$s) fail("connect 127.0.0.1:PORT: $errno $errstr");
$hello = trim(fgets($s));
fwrite($s, "ping\n");
$pong = trim(fgets($s));
fclose($s);
if ($hello !== 'db-hello' || $pong !== 'pong') fail("tcp exchange: '$hello' '$pong'");
step("tcp $hello $pong");

// 7. PHAR, as Composer and WP-CLI ship: build one (phar.readonly=0), run it
// as a program and include from it
$dir = sys_get_temp_dir() . '/phar-' . getmypid();
mkdir($dir);
$pharFile = "$dir/tool.phar";
$ph = new Phar($pharFile);
$ph->addFromString('index.php', '<?php require __DIR__ . "/lib.php"; echo tool(), "\n";');
$ph->addFromString('lib.php', '<?php function tool() { return "phar-tool-ran"; }');
$ph->setStub($ph->createDefaultStub('index.php'));
unset($ph);
exec(PHP_BINARY . ' ' . escapeshellarg($pharFile), $pout, $prc);
if ($prc !== 0 || $pout !== ['phar-tool-ran']) fail('run phar: ' . var_export($pout, true));
require "phar://$pharFile/lib.php";
if (tool() !== 'phar-tool-ran') fail('include from phar');
unlink($pharFile); rmdir($dir);
step('phar');

echo "HOSTCRON-PHP-OK\n";
`

// phpMarkers are what a good run prints, one per step.
var phpMarkers = []string{"STEP jit on=1", "STEP webroot", "STEP tmp", "STEP proc_open+exec", "STEP dns localhost=127.0.0.1", "STEP tcp db-hello pong", "STEP phar", "HOSTCRON-PHP-OK"}

// phpCommand runs the workload with opcache and the tracing JIT on, as a
// tenant would for a long-running artisan or wp-cli job.
const phpCommand = "php -d opcache.enable_cli=1 -d opcache.jit=tracing -d opcache.jit_buffer_size=16M -d phar.readonly=0 %s"

// runNowAndWait runs job once on node (run-now) and returns its run.
func runNowAndWait(t *testing.T, node string, job wire.Job, n int, timeout time.Duration) store.Run {
	t.Helper()
	c.Agent(t, node, nil, nil, "run-now", job.UnitName(), fmt.Sprint(n))
	key := fmt.Sprintf("%s#manual#%d", job.ID, n)
	var run store.Run
	c.WaitRuns(t, job.ID, timeout, func(runs []store.Run) bool {
		for _, r := range runs {
			if r.RunKey == key && r.FinishedAt != nil {
				run = r
				return true
			}
		}
		return false
	})
	return run
}

// journal is the unit's output on node. The run's record can arrive
// before journald has read the last of the unit's output stream (the
// stream is read asynchronously; on a loaded host seconds later), so
// when complete is given the journal is read again until complete says
// the output is all there, for at most 30 s; the caller's assertions
// judge whatever was read last.
func journal(t *testing.T, node string, job wire.Job, complete func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := c.Exec(node, nil, "journalctl", "-q", "--no-pager", "-o", "cat", "-u", job.UnitName()+".service")
		if err != nil {
			t.Fatalf("journalctl on %s: %v %s", node, err, out)
		}
		if complete == nil || complete(out) || time.Now().After(deadline) {
			return out
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// phpFinished says the workload's output is complete: its last line, a
// failed step, or PHP's own report of the refused JIT mapping.
func phpFinished(out string) bool {
	for _, end := range []string{"HOSTCRON-PHP-OK", "FAIL ", "mprotect() failed"} {
		if strings.Contains(out, end) {
			return true
		}
	}
	return false
}

// startListener starts a TCP service on node's loopback outside any
// tenant unit: it greets, answers "ping" with "pong", and serves forever.
func startListener(t *testing.T, node string) {
	t.Helper()
	server := fmt.Sprintf(`<?php
$srv = stream_socket_server("tcp://127.0.0.1:%d", $e, $m) or exit(1);
while ($conn = stream_socket_accept($srv, -1)) { fwrite($conn, "db-hello\n"); if (trim(fgets($conn)) === "ping") fwrite($conn, "pong\n"); fclose($conn); }
`, phpListenPort)
	// In a file: systemd would expand the $names of a "php -r" argument.
	const file = "/run/hostcron-test-db.php"
	if out, err := c.Exec(node, []byte(server), "sh", "-c", "cat >"+file); err != nil {
		t.Fatalf("listener script on %s: %v %s", node, err, out)
	}
	unit := "hostcron-test-db"
	c.Exec(node, nil, "systemctl", "stop", unit)
	c.Exec(node, nil, "systemctl", "reset-failed", unit)
	if out, err := c.Exec(node, nil, "systemd-run", "--unit="+unit, "php", file); err != nil {
		t.Fatalf("listener on %s: %v %s", node, err, out)
	}
	t.Cleanup(func() { c.Exec(node, nil, "systemctl", "stop", unit) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := c.Exec(node, nil, "sh", "-c", fmt.Sprintf("grep -q ':%04X 00000000:0000 0A' /proc/net/tcp && echo up", phpListenPort))
		if strings.Contains(out, "up") {
			return
		}
		if time.Now().After(deadline) {
			st, _ := c.Exec(node, nil, "journalctl", "-q", "--no-pager", "-u", unit)
			t.Fatalf("listener on %s never listened:\n%s", node, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPHPWorkloadUnderHardenedUnit: what tenants run (PHP with opcache
// and the tracing JIT, files in the webroot and /tmp, subprocesses, name
// resolution, TCP to a local database, PHARs as Composer and WP-CLI use
// them) works under the rendered, hardened unit. The control runs the same
// workload with MemoryDenyWriteExecute=yes added by a drop-in: the JIT
// cannot map its code executable (PHP reports the refused mprotect, then
// crashes or runs on), which is why the unit leaves that directive out,
// and shows the hardened run's "no refusal" check can fail.
func TestPHPWorkloadUnderHardenedUnit(t *testing.T) {
	const node = "node3"
	startListener(t, node)
	www := filepath.Join(c.Shared, "www/acme/public")
	script := strings.ReplaceAll(phpWorkload, "PORT", fmt.Sprint(phpListenPort))
	if err := os.WriteFile(filepath.Join(www, "workload.php"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := fmt.Sprintf(phpCommand, "workload.php")
	job := c.NewJob(t, "acme", "0 3 29 2 *", cmd, 120, 256, 5)
	control := c.NewJob(t, "acme", "0 3 29 2 *", cmd, 120, 256, 5)
	c.Agent(t, node, []wire.Job{job, control}, nil, "apply")
	t.Cleanup(func() { c.Agent(t, node, nil, nil, "remove", job.UnitName(), control.UnitName()) })

	run := runNowAndWait(t, node, job, 1, 90*time.Second)
	out := journal(t, node, job, phpFinished)
	if run.Result != wire.ResultSuccess {
		t.Errorf("workload: result %s (%s), want success; journal:\n%s", run.Result, run.FailureReason, out)
	}
	for _, m := range phpMarkers {
		if !strings.Contains(out, m) {
			t.Errorf("workload: no %q in the journal:\n%s", m, out)
		}
	}
	if strings.Contains(out, "mprotect() failed") {
		t.Errorf("workload: the JIT was refused an executable mapping under the hardened unit:\n%s", out)
	}
	t.Logf("workload journal:\n%s", out)

	// Control: the same workload with MemoryDenyWriteExecute=yes.
	dropIn := "/etc/systemd/system/" + control.UnitName() + ".service.d"
	if out, err := c.Exec(node, []byte("[Service]\nMemoryDenyWriteExecute=yes\n"), "sh", "-c",
		"mkdir -p "+dropIn+" && cat >"+dropIn+"/mdwe.conf && systemctl daemon-reload"); err != nil {
		t.Fatalf("drop-in: %v %s", err, out)
	}
	t.Cleanup(func() { c.Exec(node, nil, "sh", "-c", "rm -rf "+dropIn+" && systemctl daemon-reload") })
	crun := runNowAndWait(t, node, control, 1, 90*time.Second)
	cout := journal(t, node, control, phpFinished)
	// PHP 8.2's JIT is refused its mprotect(PROT_EXEC): PHP says so
	// ("mprotect() failed [1] Operation not permitted") and then either
	// crashes (a segmentation fault) or carries on (both seen on this
	// host, run to run); a PHP that fell back to no JIT would fail the
	// workload's JIT check instead. What the control proves is the
	// refusal, which the hardened unit's run above never shows.
	if !strings.Contains(cout, "mprotect() failed") && !(crun.Result != wire.ResultSuccess && strings.Contains(cout, "FAIL JIT")) {
		t.Errorf("control under MemoryDenyWriteExecute=yes: result %s, want the JIT's executable mapping refused; journal:\n%s", crun.Result, cout)
	}
	t.Logf("control journal (MemoryDenyWriteExecute=yes):\n%s", cout)
}

// TestMemoryWatchFollowsCgroup: a command that moves a child out of its
// process group and session (setsid) cannot take it out of the unit's
// cgroup. On these nodes the kernel does not enforce MemoryMax=; the
// runner's watch does, over the whole cgroup: the escaped child's memory
// counts, the run is a memory kill, and the child is gone (killed by the
// watch, before it could print that it survived).
func TestMemoryWatchFollowsCgroup(t *testing.T) {
	const node = "node2"
	pidFile := fmt.Sprintf("escaped-%d.pid", time.Now().UnixNano())
	cmd := `setsid sh -c 'echo $$ > ` + pidFile + `; x=$(head -c 300000000 /dev/zero | tr "\0" x); echo escaped-survived'; echo main-survived`
	job := c.NewJob(t, "globex", "0 3 29 2 *", cmd, 60, 32, 5)
	c.Agent(t, node, []wire.Job{job}, nil, "apply")
	t.Cleanup(func() { c.Agent(t, node, nil, nil, "remove", job.UnitName()) })

	run := runNowAndWait(t, node, job, 1, 60*time.Second)
	out := journal(t, node, job, nil)
	if run.Result != wire.ResultOOM {
		t.Errorf("result %s (%s), want oom; journal:\n%s", run.Result, run.FailureReason, out)
	}
	t.Logf("run %s %s; journal:\n%s", run.Result, run.FailureReason, out)
	if strings.Contains(out, "survived") {
		t.Errorf("a process outlived the memory kill:\n%s", out)
	}
	b, err := os.ReadFile(filepath.Join(c.Shared, "www/globex/public", pidFile))
	if err != nil {
		t.Fatalf("the escaped child never started: %v", err)
	}
	pid := strings.TrimSpace(string(b))
	if o, _ := c.Exec(node, nil, "sh", "-c", "test -e /proc/"+pid+" && cat /proc/"+pid+"/cmdline | tr '\\0' ' ' || echo gone"); !strings.Contains(o, "gone") {
		t.Errorf("escaped child %s still there: %s", pid, o)
	}
}
