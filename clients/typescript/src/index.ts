// @slicerd/clerk: a slicerd Clerk for Node.js (docs/client-contract.md).

export { Clerk, DELTA_VERSION, type ClerkOptions, type LookupOptions, type Logger, type Route, type TLSOptions } from "./clerk.js";
export {
  applyDelta,
  checksum,
  fromProto,
  isReset,
  receive,
  supersedes,
  validateAssignment,
  versionOf,
  type Assignment,
  type Slice,
  type Task,
  type Version,
} from "./assignment.js";
export { DeltaError, InvalidAssignmentError, InvalidConfigError, InvalidNameError } from "./errors.js";
export { KEY_SPACE_END, sliceKey } from "./hash.js";
export { frontendIndex, rocksteadier, subsetOf } from "./subset.js";
export { Table } from "./table.js";
