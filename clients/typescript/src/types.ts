// The API's types, named: each is the schema of the same name in
// docs/reference/serve-openapi.json, as openapi-typescript generated it into
// schema.d.ts. Nothing is restated by hand, so a change to the document that
// the client does not follow fails to compile.

import type { components } from "./schema.js";

type Schemas = components["schemas"];

/** An operation as `idem key` reads it: `kind`, `tenant`, `fields`, `run`, `now_ms`. */
export type Operation = Schemas["Operation"];
/** Which run asked: `run_id`, `trigger`, `attempt`. */
export type Run = NonNullable<Operation["run"]>;
/** What `begin` sends: the operation, `atomic`, and the `caller`'s name. */
export type BeginRequest = Schemas["BeginRequest"];
export type Derivation = Schemas["Derivation"];
/** `execute`, `replay`, `in-progress`, `conflict` or `rejected`, by its `answer` member. */
export type BeginAnswer = Schemas["BeginAnswer"];
export type Execute = Schemas["Execute"];
export type Replay = Schemas["Replay"];
export type InProgress = Schemas["InProgress"];
export type Conflict = Schemas["Conflict"];
export type Rejected = Schemas["Rejected"];
/** A stored outcome: `status`, `error`, and `body` (UTF-8) or `body_base64`. */
export type Outcome = Schemas["Outcome"];
/** What `complete` and `fail` answer. */
export type Finished = Schemas["Finished"];
export type Heartbeat = Schemas["Heartbeat"];
export type Resolved = Schemas["Resolved"];
export type ReportRequest = Schemas["ReportRequest"];
export type Report = Schemas["Report"];
/** An RFC 9457 problem document. */
export type Problem = Schemas["Problem"];
