// The errors the Clerk throws or reports, one class per cause, as the Go
// Clerk's sentinel errors.

/** An assignment that is not valid: the Clerk never routes by one. */
export class InvalidAssignmentError extends Error {
  override name = "InvalidAssignmentError";
}

/** A delta that does not apply to the assignment it was sent for, or whose
 * result is not the assignment the server meant (its checksum differs). */
export class DeltaError extends Error {
  override name = "DeltaError";
}

/** A Clerk option that is not valid. */
export class InvalidConfigError extends TypeError {
  override name = "InvalidConfigError";
}

/** A name (job, task or incarnation) slicerd does not accept. */
export class InvalidNameError extends TypeError {
  override name = "InvalidNameError";
}
