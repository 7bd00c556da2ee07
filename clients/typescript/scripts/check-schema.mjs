// src/schema.d.ts is generated from docs/reference/serve-openapi.json by
// openapi-typescript and committed (so the package builds from its own
// folder). This regenerates it into a temporary file and fails if the
// committed one differs: the document changed, run `npm run generate`.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL("..", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "idem-schema-"));
try {
  const fresh = join(dir, "schema.d.ts");
  execFileSync(
    process.execPath,
    [
      join(here, "node_modules/openapi-typescript/bin/cli.js"),
      join(here, "../../docs/reference/serve-openapi.json"),
      "--output",
      fresh,
    ],
    { stdio: ["ignore", "ignore", "inherit"] },
  );
  const committed = readFileSync(join(here, "src/schema.d.ts"), "utf8");
  if (readFileSync(fresh, "utf8") !== committed) {
    console.error(
      "src/schema.d.ts is not what docs/reference/serve-openapi.json generates: run `npm run generate` and commit it",
    );
    process.exit(1);
  }
  console.log("src/schema.d.ts matches docs/reference/serve-openapi.json");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
