// A headless Chromium driven line by line: check.py writes one JSON command a
// line on stdin, this answers one JSON line {result, error} on stdout.
// Every console message of type error or warning and every page error is
// kept; "problems" hands them over (a CSP violation is one).
import { chromium } from "playwright-core";
import readline from "node:readline";

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, colorScheme: "light" });
// Content-Security-Policy violations as the page sees them (besides the console's errors).
await context.addInitScript(() => {
  window.__csp = [];
  document.addEventListener("securitypolicyviolation",
    (e) => window.__csp.push(`${e.effectiveDirective} ${e.blockedURI} ${e.sample}`));
});
const page = await context.newPage();
const problems = [];
page.on("console", (m) => {
  if (m.type() === "error" || m.type() === "warning") problems.push(`${m.type()}: ${m.text()}`);
});
page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
page.on("dialog", (d) => { problems.push(`dialog: ${d.message()}`); d.dismiss(); });

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const cmd = JSON.parse(line);
  let result = null, error = null;
  try {
    if (cmd.op === "goto") {
      const response = await page.goto(cmd.url, { waitUntil: "load" });
      result = { status: response ? response.status() : 0, title: await page.title(), url: page.url() };
      if (cmd.live) {
        await page.waitForFunction(() => document.body.getAttribute("data-live") === "open", null, { timeout: 5000 });
      }
    } else if (cmd.op === "fill") {
      await page.fill(cmd.selector, cmd.value);
      result = true;
    } else if (cmd.op === "submit") {                 // click, and wait for the page the click leads to
      const [response] = await Promise.all([page.waitForNavigation({ waitUntil: "load" }), page.click(cmd.selector)]);
      result = { status: response ? response.status() : 0, title: await page.title(), url: page.url() };
    } else if (cmd.op === "wait_text") {
      await page.waitForFunction(([sel, text]) => [...document.querySelectorAll(sel)]
        .some((e) => e.textContent.includes(text)), [cmd.selector, cmd.text], { timeout: cmd.timeout || 15000 });
      result = true;
    } else if (cmd.op === "count_text") {
      result = await page.$$eval(cmd.selector, (es, text) => es.filter((e) => e.textContent.includes(text)).length,
        cmd.text);
    } else if (cmd.op === "texts") {
      result = await page.$$eval(cmd.selector, (es) => es.map((e) => e.textContent));
    } else if (cmd.op === "rows") {
      result = await page.$$eval(cmd.selector, (trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent)));
    } else if (cmd.op === "eval") {
      result = await page.evaluate(cmd.js);
    } else if (cmd.op === "viewport") {
      await page.setViewportSize({ width: cmd.width, height: cmd.height || 900 });
      result = true;
    } else if (cmd.op === "screenshot") {
      await page.screenshot({ path: cmd.path, fullPage: !!cmd.full });
      result = cmd.path;
    } else if (cmd.op === "problems") {
      result = problems.splice(0);
    } else if (cmd.op === "quit") {
      await browser.close();
      process.stdout.write(JSON.stringify({ result: "bye", error: null }) + "\n");
      break;
    } else {
      error = `unknown op ${cmd.op}`;
    }
  } catch (e) {
    error = String(e && e.message ? e.message : e);
  }
  process.stdout.write(JSON.stringify({ result, error }) + "\n");
}
