#!/usr/bin/env python3
"""The console in a real browser: headless Chromium, driven by Playwright.

    python3 conformance/console/check.py [--shots DIR] [--install]

Starts doze (its console on a free port), a real librdkafka transactional
producer (confluent-kafka), and Debian's Chromium through playwright-core
(npm; it never downloads a browser: CHROMIUM or /usr/bin/chromium). Then:

  1. every page opens with no console error or warning (a CSP violation is one);
  2. the Cluster page, left open, shows without a reload the producer's
     transaction go Ongoing (and hold the LSO back) -> PrepareCommit ->
     CompleteCommit, and the LSO catch up with the high watermark;
  3. the Transaction page, left open, lights Ongoing, then CompleteAbort after
     an abort, in its drawn state machine (the transitions taken marked),
     with EndTxn (abort) in its steps, each step's time to the millisecond
     and the time since the step before; no CSP violation;
  4. the message browser, left open, gets the COMMIT and ABORT dividers and
     the aborted records as they are written;
  5. records whose key, value and headers are script run nothing;
     ?offset=abc gets a 400 page naming it, with the usual header;
     at 700 px wide no table cell's word is broken mid-word, no cell
     overflows and no page is wider than the window (tables scroll in their
     box); the Cluster page, left open through 500 journal events, shows
     the last 20 and stays under 1600 px, and /events has them all;
  6. a second doze with a SASL listener and an authorizer asks for a login:
     a page sends the browser to the form, a wrong password is refused, the
     right one (a PLAIN user) lands on the page first asked for, with its
     live stream; alice, allowed one topic by an ACL, sees that one only;
     Log out ends the session;
  7. the demo (python3 doze_kafka.py demo, run here in-process) with its
     console open in the browser: the Transaction page of demo-tx lit
     Ongoing at step 3, CompleteCommit at step 4, the new epoch at step 6;
  8. a screenshot of each page goes to --shots (the README's come from here).

--install installs what is missing (apt-get chromium; npm playwright-core).
Prints RESULT ok, or RESULT fail with what failed; exit status 0 or 1.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # conformance/
from lib import free_port  # noqa: E402
import needs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

CACHE = os.environ.get("DOZE_KAFKA_CACHE") or os.path.expanduser("~/.cache/doze-kafka")
NODE_DIR = os.path.join(CACHE, "console")
SHOTS = os.path.join(HERE, "screenshots")


def chromium_path(install):
    for path in (os.environ.get("CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium",
                 shutil.which("chromium-browser")):
        if path and os.access(path, os.X_OK):
            return path
    if install:
        subprocess.run(["apt-get", "update", "-q"], check=True, stdout=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], check=True, stdout=sys.stderr,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        return chromium_path(False)
    sys.exit("no Chromium: install Debian's chromium (apt-get install chromium), set CHROMIUM, or use --install")


def playwright_dir():
    """playwright-core from the committed package-lock.json, in the cache (npm ci)."""
    lock = os.path.join(HERE, "package-lock.json")
    stamp = os.path.join(NODE_DIR, "package-lock.json")
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "playwright-core")) or \
            not os.path.exists(stamp) or open(stamp).read() != open(lock).read():
        os.makedirs(NODE_DIR, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(os.path.join(HERE, name), NODE_DIR)
        subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True,
                       stdout=sys.stderr)
    shutil.copy(os.path.join(HERE, "driver.mjs"), NODE_DIR)
    return NODE_DIR


class Browser:
    """driver.mjs over a pipe: one JSON command, one JSON answer."""

    def __init__(self, chromium, node_dir):
        self.proc = subprocess.Popen(["node", os.path.join(node_dir, "driver.mjs")], cwd=node_dir,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=dict(os.environ, CHROMIUM=chromium))

    def do(self, op, **args):
        self.proc.stdin.write(json.dumps(dict(op=op, **args)) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        if answer["error"]:
            raise CheckFailed(f"{op} {args}: {answer['error']}")
        return answer["result"]

    def close(self):
        try:
            self.do("quit")
        except Exception:
            pass
        self.proc.kill()


class CheckFailed(Exception):
    pass


def check(condition, what):
    if not condition:
        raise CheckFailed(what)
    print(f"  ok: {what}", flush=True)


LIT = "svg.machine g.state-box.now[aria-current=step]"       # the state machine's current state

# In the page: every table cell's words (split where a line may break: spaces,
# hyphens, slashes) that a line break cut in two, and every cell whose text
# overflows it; tokens over 40 characters may break (a hex value, say).
BROKEN_WORDS_JS = r"""(() => {
  const broken = [], overflowing = [];
  for (const cell of document.querySelectorAll("#main td, #main th")) {
    if (cell.scrollWidth > cell.clientWidth + 1) overflowing.push(cell.textContent.slice(0, 60));
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const words = /[^\s\-\u2010-\u2014\/]+/g;
      for (let m = words.exec(node.data); m; m = words.exec(node.data)) {
        if (m[0].length < 2 || m[0].length > 40) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        if (new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size > 1) broken.push(m[0]);
      }
    }
  }
  return {broken, overflowing, width: document.documentElement.scrollWidth, csp: window.__csp};
})()"""


def check_transaction_page(browser):
    """Times to the millisecond, the time between steps, the diagram lit, no CSP violation."""
    times = browser.do("texts", selector="#main table time")
    check(times and all(re.search(r"\b\d\d:\d\d:\d\d\.\d{3}\b", t) for t in times),
          f"every step's time to the millisecond: {times[-1]}")
    since = browser.do("texts", selector="#main table td.num")
    check(any(re.fullmatch(r"\+\d+ ms", t) for t in since), "the time since the step before (+N ms)")
    check(browser.do("count_text", selector="svg.machine path.edge.taken", text="") >= 4 and
          browser.do("count_text", selector="svg.machine g.state-box", text="") == 8,
          "the state machine drawn: eight states, the transitions taken marked")
    check(browser.do("eval", js="window.__csp") == [], "no Content-Security-Policy violation")


def check_narrow(browser, url, shots):
    """At 700 px: no cell's word broken mid-word, nothing wider than the window (wide tables scroll in their box)."""
    browser.do("viewport", width=700, height=900)
    try:
        for path in ("/topics/orders", "/", "/txn?id=tx-browser", "/topics/orders/0", "/groups", "/events"):
            browser.do("goto", url=url + path)
            got = browser.do("eval", js=BROKEN_WORDS_JS)
            check(got["broken"] == [] and got["overflowing"] == [] and got["width"] <= 700 and got["csp"] == [],
                  f"{path} at 700 px: no word broken, no cell overflowing, page {got['width']} px wide "
                  f"({got['broken'][:5]}, {got['overflowing'][:3]})")
            if path == "/topics/orders":
                browser.do("screenshot", path=os.path.join(shots, "topic-700.png"), full=True)
    finally:
        browser.do("viewport", width=1280, height=900)


def fill_the_journal(doze, url, browser, shots, producer, events=500):
    """The Cluster page left open while transactions journal `events`: it stays short (the last 20 only)."""
    from urllib.request import urlopen
    browser.do("goto", url=url + "/", live=True)
    browser.do("eval", js="window.__kept = 5")
    last = 0
    while last < events:
        producer.begin_transaction()
        producer.produce("orders", b"many", partition=1)
        producer.commit_transaction(10)
        last = json.load(urlopen(url + "/api/events?limit=1"))["last_id"]
    browser.do("wait_text", selector="#main table", text=f"#{last}")
    feed = browser.do("rows", selector="#main section:last-of-type tbody tr")
    height = browser.do("eval", js="document.documentElement.scrollHeight")
    check(len(feed) == 20 and height < 1600 and browser.do("eval", js="window.__kept") == 5,
          f"after {last} events, the Cluster page followed without a reload: {len(feed)} events shown, "
          f"{height} px tall")
    browser.do("screenshot", path=os.path.join(shots, "cluster-500.png"), full=True)
    got = browser.do("goto", url=url + "/events")
    rows = browser.do("rows", selector="#main tbody tr")
    check(got["status"] == 200 and len(rows) == 100 and rows[0][0] == f"#{last}"
          and browser.do("count_text", selector="nav.pager a", text="Older") == 1,
          "the events page: the newest 100, and a link to older ones")


def run(doze, url, browser, shots):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": doze.bootstrap})
    admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(10)
    producer = Producer({"bootstrap.servers": doze.bootstrap, "transactional.id": "tx-browser",
                         "linger.ms": 0})

    print("the Cluster page, left open, follows a transaction", flush=True)
    browser.do("goto", url=url + "/", live=True)
    browser.do("eval", js="window.__kept = 1")
    producer.init_transactions(10)
    browser.do("wait_text", selector="#main table", text="tx-browser")
    producer.begin_transaction()
    producer.produce("orders", b"committed-1", key=b"k1", partition=0)
    producer.produce("orders", b"committed-2", key=b"k2", partition=0)
    producer.flush(10)
    browser.do("wait_text", selector="#main table", text="Ongoing")
    browser.do("wait_text", selector="#main table", text="open since offset 0")
    check(True, "Ongoing, and the transaction named as what holds orders-0's LSO back")
    browser.do("screenshot", path=os.path.join(shots, "cluster.png"), full=True)
    producer.commit_transaction(10)
    browser.do("wait_text", selector="#main table", text="CompleteCommit")
    browser.do("wait_text", selector="#main table", text="Ongoing \u2192 PrepareCommit")
    browser.do("wait_text", selector="#main table", text="PrepareCommit \u2192 CompleteCommit")
    check(True, "Ongoing -> PrepareCommit -> CompleteCommit in the feed, CompleteCommit in the table")
    rows = browser.do("rows", selector="#main table tr")
    orders0 = [r for r in rows if r[0] == "orders-0" and len(r) == 5]
    check(orders0 and orders0[0][1:] == ["0", "3", "3", "\u2014"], f"orders-0's LSO caught up: {orders0}")
    check(browser.do("eval", js="window.__kept") == 1, "all without a reload")

    print("the Transaction page, left open, follows an abort", flush=True)
    browser.do("goto", url=url + "/txn?id=tx-browser", live=True)
    browser.do("eval", js="window.__kept = 2")
    producer.begin_transaction()
    producer.produce("orders", b"aborted-1", partition=0)
    producer.flush(10)
    browser.do("wait_text", selector=LIT, text="Ongoing")
    check(True, "Ongoing lit in the drawn state machine")
    producer.abort_transaction(10)
    browser.do("wait_text", selector=LIT, text="CompleteAbort")
    browser.do("wait_text", selector="#main table", text="EndTxn (abort)")
    check(browser.do("eval", js="window.__kept") == 2, "CompleteAbort lit, EndTxn (abort) in the timeline, no reload")
    check_transaction_page(browser)
    browser.do("screenshot", path=os.path.join(shots, "transaction.png"), full=True)

    print("the message browser, left open, gets the dividers", flush=True)
    browser.do("goto", url=url + "/topics/orders/0", live=True)
    browser.do("eval", js="window.__kept = 3")
    commits = browser.do("count_text", selector="tr.marker", text="COMMIT by producer")
    check(commits == 1 and browser.do("count_text", selector="tr.marker", text="ABORT by producer") == 1,
          "one COMMIT and one ABORT divider")
    check(browser.do("count_text", selector="tr.aborted", text="ABORTED") == 1, "the aborted record marked")
    producer.begin_transaction()
    producer.produce("orders", b"committed-3", partition=0)
    producer.commit_transaction(10)
    browser.do("wait_text", selector="#main", text="committed-3")
    check(browser.do("count_text", selector="tr.marker", text="COMMIT by producer") == 2
          and browser.do("eval", js="window.__kept") == 3, "the new records and COMMIT divider, no reload")
    browser.do("screenshot", path=os.path.join(shots, "browser.png"), full=True)

    print("records carrying script run nothing", flush=True)
    plain = Producer({"bootstrap.servers": doze.bootstrap})
    plain.produce("orders", value=b"<script>window.__pwned = 1</script>",
                  key=b"<img src=x onerror=\"window.__pwned = 2\">", partition=1,
                  headers=[("h\"><svg onload=window.__pwned=3>", b"<script>window.__pwned=4</script>")])
    plain.flush(10)
    for view in ("log", "uncommitted", "committed"):
        browser.do("goto", url=url + f"/topics/orders/1?view={view}")
        browser.do("wait_text", selector="#main", text="<script>window.__pwned = 1</script>")
        check(browser.do("eval", js="typeof window.__pwned") == "undefined", f"{view} view: shown as text, ran nothing")
    browser.do("goto", url=url + "/topics/orders/1?format=hex")
    check(browser.do("eval", js="typeof window.__pwned") == "undefined", "hex view: ran nothing")

    print("every page, with no console error or warning", flush=True)
    browser.do("problems")
    pages = ["/", "/topics", "/topics/orders", "/topics/orders/0", "/topics/orders/0?view=committed",
             "/topics/orders/0?view=uncommitted&format=json", "/topics/orders/0?at=end&format=hex",
             "/topics/orders/0?timestamp=0", "/txn?id=tx-browser", "/groups", "/apis"]
    for path in pages:
        got = browser.do("goto", url=url + path)
        check(got["status"] == 200 and got["title"].endswith("doze-kafka"), f"{path}: {got['title']}")
    browser.do("goto", url=url + "/topics")
    browser.do("screenshot", path=os.path.join(shots, "topics.png"), full=True)
    problems = browser.do("problems")
    check(problems == [], f"no console errors or warnings: {problems}")

    print("an offset that is not one", flush=True)
    got = browser.do("goto", url=url + "/topics/orders/0?offset=abc")
    said = browser.do("texts", selector="#main p")
    check(got["status"] == 400 and any("offset=abc is not accepted here" in t for t in said)
          and browser.do("count_text", selector="header nav", text="Topics") == 1
          and browser.do("count_text", selector="footer", text="JSON") == 0,
          f"a 400 page naming the parameter, with the usual header and no JSON link: {said}")
    problems = browser.do("problems")
    check(len(problems) == 1 and "status of 400" in problems[0], f"the only console message is the 400's: {problems}")

    print("at 700 px wide", flush=True)
    check_narrow(browser, url, shots)

    print("the Cluster page, left open, through 500 events", flush=True)
    fill_the_journal(doze, url, browser, shots, producer)
    problems = browser.do("problems")
    check(problems == [], f"no console errors or warnings: {problems}")


LOGIN_SETTINGS = {
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";',
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",                 # the PLAINTEXT listener's clients: the setup below
}


def run_login(doze, url, browser, shots):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic
    from confluent_kafka.admin import ResourcePatternType, ResourceType
    admin = AdminClient({"bootstrap.servers": doze.bootstrap})
    for name in ("seen", "unseen"):
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    binding = AclBinding(ResourceType.TOPIC, "seen", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    admin.create_acls([binding])[binding].result(10)

    print("a SASL broker's console asks for a login", flush=True)
    browser.do("problems")
    got = browser.do("goto", url=url + "/topics")
    check(got["url"] == url + "/login?next=%2Ftopics" and got["title"].startswith("Log in"),
          f"a page sends the browser to the login form: {got['url']}")
    browser.do("screenshot", path=os.path.join(shots, "login.png"), full=False)
    browser.do("fill", selector="#user", value="alice")
    browser.do("fill", selector="#password", value="wrong")
    got = browser.do("submit", selector="form.login button")
    check(got["status"] == 401 and browser.do("count_text", selector="[role=alert]", text="Invalid") == 1,
          "a wrong password is refused")
    refused = browser.do("problems")
    check(len(refused) == 1 and "status of 401" in refused[0], f"the only console message is the 401's: {refused}")
    browser.do("fill", selector="#password", value="alice-secret")
    got = browser.do("submit", selector="form.login button")
    check(got["status"] == 200 and got["url"] == url + "/topics", f"logged in, on the page asked for: {got['url']}")
    topics = [r[0] for r in browser.do("rows", selector="#main tbody tr")]
    check(topics == ["seen"] and browser.do("count_text", selector="header", text="Logged in as alice") == 1,
          f"alice sees the topic its ACL allows, only: {topics}")
    browser.do("goto", url=url + "/", live=True)
    check(True, "its live stream opens with the session")
    got = browser.do("submit", selector="form.who button")
    check(got["url"].startswith(url + "/login"), "Log out ends the session")
    got = browser.do("goto", url=url + "/")
    check(got["url"].startswith(url + "/login"), "and the pages ask again")
    problems = browser.do("problems")
    check(problems == [], f"no console errors or warnings: {problems}")


def run_demo(browser, shots):
    """The demo's steps, the browser on demo-tx's Transaction page between them."""
    import doze_kafka
    port = free_port()
    url = f"http://127.0.0.1:{port}/txn?id=demo-tx"
    expect = {3: (LIT, "Ongoing"), 4: (LIT, "CompleteCommit"), 6: ("dl.facts", "epoch 1")}
    done = []

    def pause():
        step = len(done) + 1
        done.append(step)
        if step in expect:
            browser.do("goto", url=url, live=True)
            browser.do("wait_text", selector=expect[step][0], text=expect[step][1])
            check(True, f"after demo step {step}: {expect[step][1]}")
            browser.do("screenshot", path=os.path.join(shots, f"demo-step{step}.png"), full=True)
    print("the demo, its Transaction page watched", flush=True)
    browser.do("problems")
    results = doze_kafka.demo(say=lambda text: None, pause=pause, console=f"127.0.0.1:{port}")
    check(len(results) == 12 and results[7]["after"] == "CompleteCommit" and results[-1]["late"] == 0,
          "the demo ran its twelve steps")
    problems = browser.do("problems")
    check(problems == [], f"no console errors or warnings: {problems}")


def main():
    needs.venv()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shots", default=SHOTS, help="where the screenshots go")
    p.add_argument("--install", action="store_true", help="apt-get chromium, npm playwright-core when missing")
    args = p.parse_args()
    chromium = chromium_path(args.install)
    node_dir = playwright_dir()
    os.makedirs(args.shots, exist_ok=True)
    from brokers import Doze
    work = tempfile.mkdtemp(prefix="doze-console-")
    port = free_port()
    doze = Doze(work, settings={"doze.console.listener": f"127.0.0.1:{port}"})
    doze.start()
    browser = Browser(chromium, node_dir)
    started = time.monotonic()
    try:
        run(doze, f"http://127.0.0.1:{port}", browser, args.shots)
        login_port = free_port()
        os.makedirs(os.path.join(work, "secured"))
        secured = Doze(os.path.join(work, "secured"), settings={
            "doze.console.listener": f"127.0.0.1:{login_port}", **LOGIN_SETTINGS})
        secured.start()
        try:
            run_login(secured, f"http://127.0.0.1:{login_port}", browser, args.shots)
        finally:
            secured.stop()
        run_demo(browser, args.shots)
        print(f"RESULT ok ({time.monotonic() - started:.1f} s; screenshots in {args.shots})")
        return 0
    except (CheckFailed, Exception) as e:
        print(f"RESULT fail: {e}")
        return 1
    finally:
        browser.close()
        doze.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
