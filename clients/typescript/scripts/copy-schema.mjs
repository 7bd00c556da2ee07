// tsc emits no .d.ts file it was given: the generated schema types are
// copied beside the declarations that import them, so that the published
// package's types resolve.
import { copyFileSync } from "node:fs";

copyFileSync(new URL("../src/schema.d.ts", import.meta.url), new URL("../dist/schema.d.ts", import.meta.url));
