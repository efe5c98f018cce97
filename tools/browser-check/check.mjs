// Renders the course's pages as GitHub would and checks them in headless Chromium.
//
//   node tools/browser-check/check.mjs [--root DIR] [--out DIR] [--chromium PATH]
//
// Every lesson page (lessons/*/README.md) and the course README are turned
// into HTML the way GitHub shows them: GitHub Flavored Markdown by cmark-gfm,
// GitHub's own parser, code highlighted (highlight.js), ```mermaid blocks
// drawn by Mermaid, GitHub's stylesheet. A server on 127.0.0.1 serves them, with
// Mermaid and the styles from node_modules, so nothing comes from a CDN;
// every request off this machine is refused and counted as an error.
//
// A page fails on a Mermaid parse or render error, a console error or page
// exception, a request that fails, a relative link to a file (or heading)
// that does not exist, an image that does not load, or a lesson page without
// its Compiler Explorer link. Screenshots of every page go to DIR
// (default docs/screenshots under the course): <lesson id>.png and index.png,
// and beside them pages.json: the SHA-256 of each page and of this check
// (check.mjs, package-lock.json) they were taken from, which
// tests/test_browser.py compares with the files now to tell a stale screenshot.

import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, extname, join, normalize, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

import hljs from "highlight.js";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const cmark = require("cmark-gfm");

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 && at + 1 < args.length ? args[at + 1] : fallback;
};
const root = resolve(option("--root", resolve(here, "..", "..")));   // the course: README.md, lessons/
const outDir = resolve(option("--out", join(root, "docs", "screenshots")));
const chromiumPath = option("--chromium", process.env.CHROMIUM || "/usr/bin/chromium");

// The same flags a locked-down CI machine needs: no sandbox (root in a container),
// no GPU, and nothing that reaches for the network on its own.
const CHROMIUM_ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

// -- Markdown as GitHub renders it ----------------------------------------------------------------
// cmark-gfm is the parser github.com renders Markdown with (the GFM spec's reference implementation):
// tables, strikethrough, autolinks, task lists, footnotes and the tag filter, raw HTML let through
// (GitHub then sanitizes it), code blocks as GitHub writes them, <pre lang="x"><code>.
const GFM = {
  unsafe: true, footnotes: true, githubPreLang: true,
  extensions: { table: true, strikethrough: true, autolink: true, tagfilter: true, tasklist: true },
};

hljs.registerAliases(["cuda", "cu"], { languageName: "cpp" });   // GitHub highlights CUDA as C++ with extras

function escapeHtml(text) {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function unescapeHtml(text) {
  return text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&#39;/g, "'")
    .replace(/&amp;/g, "&");
}

// GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes, -1, -2 for repeats.
export function slug(text) {
  return text.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
}

// The page's HTML and its heading ids, as github.com gives them: ```mermaid blocks become
// charts (drawn below, from their text), other fenced code is highlighted.
function renderMarkdown(text) {
  let html = cmark.renderHtmlSync(text, GFM);
  html = html.replace(/<pre lang="([^"]+)"><code>([\s\S]*?)<\/code><\/pre>/g, (whole, language, code) => {
    if (language === "mermaid") return `<pre class="mermaid">${code}</pre>`;
    if (!hljs.getLanguage(language)) return whole;
    const highlighted = hljs.highlight(unescapeHtml(code), { language }).value;
    return `<pre class="hljs"><code class="language-${language}">${highlighted}</code></pre>`;
  });
  const ids = [];
  const seen = new Map();
  html = html.replace(/<h([1-6])>([\s\S]*?)<\/h\1>/g, (whole, level, inner) => {
    const base = slug(unescapeHtml(inner.replace(/<[^>]*>/g, "")));
    const count = seen.get(base) || 0;
    seen.set(base, count + 1);
    const id = count ? `${base}-${count}` : base;
    ids.push(id);
    return `<h${level} id="${id}">${inner}</h${level}>`;
  });
  return { html, ids };
}

function pageHtml(markdownPath) {
  const body = renderMarkdown(readFileSync(markdownPath, "utf8")).html;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>${escapeHtml(relative(root, markdownPath))}</title>
<link rel="stylesheet" href="/__check__/github-markdown.css">
<link rel="stylesheet" href="/__check__/github.css">
<style>
  body { background: #fff; margin: 0; }
  .markdown-body { box-sizing: border-box; max-width: 1012px; margin: 24px auto; padding: 32px;
                   border: 1px solid #d1d9e0; border-radius: 6px; }
  .markdown-body pre.mermaid { background: none; text-align: center; }
</style>
<script src="/__check__/mermaid.min.js"></script>
<script>mermaid.initialize({ startOnLoad: false });</script>
</head><body><article class="markdown-body">
${body}
</article>
<script>
  window.checkMermaid = async () => {
    const problems = [];
    mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: "default" });
    for (const [n, block] of [...document.querySelectorAll("pre.mermaid")].entries()) {
      const text = block.textContent;
      try {
        await mermaid.parse(text);
        const { svg } = await mermaid.render("chart" + n, text);
        block.innerHTML = svg;
      } catch (error) {
        problems.push("chart " + (n + 1) + ": " + String(error && error.message || error).slice(0, 300));
      }
    }
    return problems;
  };
</script>
</body></html>`;
}

// -- the server -----------------------------------------------------------------------------------
const ASSETS = {
  "/__check__/mermaid.min.js": require.resolve("mermaid/dist/mermaid.min.js"),
  "/__check__/github-markdown.css": require.resolve("github-markdown-css/github-markdown-light.css"),
  "/__check__/github.css": require.resolve("highlight.js/styles/github.css"),
};
const TYPES = { ".js": "text/javascript", ".css": "text/css", ".png": "image/png", ".svg": "image/svg+xml",
                ".jpg": "image/jpeg", ".gif": "image/gif", ".json": "application/json" };

function serve(request, response) {
  const path = decodeURIComponent(new URL(request.url, "http://127.0.0.1").pathname);
  const asset = ASSETS[path];
  const file = asset || normalize(join(root, path));
  if (!asset && !(file + sep).startsWith(root + sep) && file !== root) {
    response.writeHead(403).end();
    return;
  }
  if (!existsSync(file) || !statSync(file).isFile()) {
    response.writeHead(404, { "content-type": "text/plain" }).end("not found: " + path);
    return;
  }
  if (!asset && extname(file) === ".md") {
    response.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(pageHtml(file));
    return;
  }
  response.writeHead(200, { "content-type": TYPES[extname(file)] || "text/plain; charset=utf-8" })
    .end(readFileSync(file));
}

// -- links ------------------------------------------------------------------------------------------
const anchorsOf = new Map();
function anchors(markdownPath) {
  if (!anchorsOf.has(markdownPath)) anchorsOf.set(markdownPath, new Set(renderMarkdown(readFileSync(markdownPath, "utf8")).ids));
  return anchorsOf.get(markdownPath);
}

function brokenLink(pagePath, href) {
  if (/^[a-z][a-z0-9+.-]*:/i.test(href)) return null;   // absolute: not fetched offline
  const [target, fragment] = href.split("#", 2);
  const file = target ? resolve(dirname(pagePath), decodeURIComponent(target)) : pagePath;
  if (!(file + sep).startsWith(root + sep)) return `${href}: outside the repository`;
  if (!existsSync(file)) return `${href}: no such file ${relative(root, file)}`;
  if (fragment && extname(file) === ".md" && !anchors(file).has(fragment)) {
    return `${href}: ${relative(root, file)} has no heading #${fragment}`;
  }
  if (fragment && extname(file) === ".cu") {
    const lines = readFileSync(file, "utf8").split("\n").length;
    const numbers = fragment.match(/^L(\d+)(?:-L(\d+))?$/);
    if (!numbers || Number(numbers[2] || numbers[1]) > lines) return `${href}: no such lines in ${relative(root, file)}`;
  }
  return null;
}

const sha256 = (path) => createHash("sha256").update(readFileSync(path)).digest("hex");
const plural = (count, noun) => `${count} ${noun}${count === 1 ? "" : "s"}`;

// -- the check ------------------------------------------------------------------------------------
function pages() {
  const lessons = readdirSync(join(root, "lessons"))
    .filter((id) => existsSync(join(root, "lessons", id, "README.md")))
    .sort()
    .map((id) => ({ name: id, path: join(root, "lessons", id, "README.md"), lesson: true }));
  return [...lessons, { name: "index", path: join(root, "README.md"), lesson: false }];
}

async function checkPage(context, base, page) {
  const problems = [];
  const tab = await context.newPage();
  tab.on("console", (message) => {
    if (message.type() === "error") problems.push(`console error: ${message.text()}`);
  });
  tab.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  tab.on("requestfailed", (request) => {
    problems.push(`request failed: ${request.url().slice(0, 120)} (${request.failure()?.errorText})`);
  });
  tab.on("response", (response) => {
    if (response.status() >= 400) problems.push(`HTTP ${response.status()}: ${response.url()}`);
  });
  const url = base + "/" + relative(root, page.path).split(sep).join("/");
  await tab.goto(url, { waitUntil: "load" });
  problems.push(...(await tab.evaluate(() => window.checkMermaid())));
  const charts = await tab.$$eval("pre.mermaid", (blocks) => blocks.map((b) => ({
    svg: !!b.querySelector("svg"), bars: b.querySelectorAll("svg rect").length, text: b.textContent.slice(0, 80),
  })));
  charts.forEach((chart, n) => {
    if (!chart.svg) problems.push(`chart ${n + 1} was not drawn: ${chart.text}`);
  });
  const hrefs = await tab.$$eval("a[href]", (links) => links.map((a) => a.getAttribute("href")));
  for (const href of hrefs) {
    const broken = brokenLink(page.path, href);
    if (broken) problems.push(`broken link ${broken}`);
  }
  const images = await tab.$$eval("img", (found) => found.map((img) => ({ src: img.getAttribute("src"),
                                                                         ok: img.complete && img.naturalWidth > 0 })));
  for (const image of images) if (!image.ok) problems.push(`image does not load: ${image.src}`);
  if (page.lesson) {
    const godbolt = await tab.$$eval("a", (links) => links.filter((a) => a.textContent === "Open in Compiler Explorer")
      .map((a) => a.getAttribute("href")));
    if (godbolt.length !== 1 || !godbolt[0].startsWith("https://godbolt.org/#z:")) {
      problems.push(`the Compiler Explorer link is missing or not a #z: link: ${JSON.stringify(godbolt).slice(0, 80)}`);
    }
  }
  const highlighted = await tab.$$eval("pre code .hljs-keyword, pre code .hljs-type", (found) => found.length);
  const code = await tab.$$eval("pre code.language-cuda", (found) => found.length);
  if (code && !highlighted) problems.push("code blocks are not highlighted");
  await tab.screenshot({ path: join(outDir, `${page.name}.png`), fullPage: true });
  await tab.close();
  return { problems, charts: charts.length, links: hrefs.length, code };
}

async function main() {
  if (!existsSync(chromiumPath)) {
    console.error(`browser check: no Chromium at ${chromiumPath}; run tools/browser-check/setup.sh`);
    process.exit(3);
  }
  mkdirSync(outDir, { recursive: true });
  const server = createServer(serve);
  await new Promise((done) => server.listen(0, "127.0.0.1", done));
  const base = `http://127.0.0.1:${server.address().port}`;
  const profile = mkdtempSync(join(tmpdir(), "browser-check-profile-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath, headless: true, args: CHROMIUM_ARGS,
    viewport: { width: 1100, height: 900 }, deviceScaleFactor: 1,
  });
  // Offline by construction: anything not served here is refused (and then reported).
  await context.route("**/*", (route) => (route.request().url().startsWith(base) ? route.continue() : route.abort()));
  let failed = 0;
  const taken = {};
  try {
    for (const page of pages()) {
      const started = Date.now();
      const result = await checkPage(context, base, page);
      const shot = join(outDir, `${page.name}.png`);
      taken[`${page.name}.png`] = { page: relative(root, page.path).split(sep).join("/"),
                                    page_sha256: sha256(page.path), png_sha256: sha256(shot) };
      const where = relative(root, page.path);
      const summary = `${plural(result.charts, "chart")}, ${plural(result.code, "CUDA block")}, ${plural(result.links, "link")}`;
      if (result.problems.length) {
        failed += 1;
        console.log(`FAIL ${where}: ${summary}`);
        for (const problem of result.problems) console.log(`  ${problem}`);
      } else {
        console.log(`ok   ${where}: ${summary}, ${((Date.now() - started) / 1000).toFixed(1)} s`);
      }
    }
  } finally {
    await context.close();
    server.close();
    rmSync(profile, { recursive: true, force: true });
  }
  const renderer = Object.fromEntries(["check.mjs", "package-lock.json"]
    .map((name) => [`tools/browser-check/${name}`, sha256(join(here, name))]));
  writeFileSync(join(outDir, "pages.json"), JSON.stringify({ renderer, screenshots: taken }, null, 2) + "\n");
  console.log(`screenshots in ${relative(root, outDir) || "."}`);
  console.log(`browser-check: ${pages().length - failed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((error) => {
  console.error(`browser check: ${error.stack || error}`);
  process.exit(2);
});
