// Builds dist/esm (ES modules) and dist/cjs (CommonJS), each with its .d.ts
// files, and build/ (src + tests compiled together for node:test);
// --no-test: dist/ only (the prepack script of `npm pack`).
import { execFileSync } from "node:child_process";
import {
  mkdirSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
const noTest = process.argv.includes("--no-test");
rmSync(join(root, "dist"), { recursive: true, force: true });
// --no-test (npm pack's prepack) leaves build/ (the compiled tests) alone.
if (!noTest) rmSync(join(root, "build"), { recursive: true, force: true });
for (const project of noTest
  ? ["tsconfig.json", "tsconfig.cjs.json"]
  : ["tsconfig.json", "tsconfig.cjs.json", "tsconfig.test.json"]) {
  execFileSync(process.execPath, [tsc, "-p", join(root, project)], {
    stdio: "inherit",
  });
}
mkdirSync(join(root, "dist", "cjs"), { recursive: true });
writeFileSync(
  join(root, "dist", "cjs", "package.json"),
  JSON.stringify({ type: "commonjs" }) + "\n",
);

// Ship only the declarations the public entry point reaches (index.d.ts and
// what it imports): the connection, pool and release modules are internal
// (issue 32 finding 3); their .js files stay, as the code needs them.
for (const dir of ["esm", "cjs"]) {
  const base = join(root, "dist", dir);
  const seen = new Set();
  const todo = ["index"];
  while (todo.length > 0) {
    const m = todo.pop();
    if (seen.has(m)) continue;
    seen.add(m);
    const text = readFileSync(join(base, `${m}.d.ts`), "utf8");
    for (const r of text.matchAll(
      /(?:from |import |import\()"\.\/([\w-]+)\.js"/g,
    )) {
      todo.push(r[1]);
    }
  }
  for (const f of readdirSync(base)) {
    if (f.endsWith(".d.ts") && !seen.has(f.slice(0, -5))) {
      rmSync(join(base, f));
    }
  }
}
