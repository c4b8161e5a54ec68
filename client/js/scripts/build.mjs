// Builds dist/esm (ES modules) and dist/cjs (CommonJS), each with its .d.ts
// files, and build/ (src + tests compiled together for node:test).
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
rmSync(join(root, "dist"), { recursive: true, force: true });
rmSync(join(root, "build"), { recursive: true, force: true });
for (const project of process.argv.includes("--no-test")
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
