// Package assigner is slicerd's Assigner: it watches gossip for each
// job's live tasks, decides the job's assignments (package assign's
// algorithms, with load reports, drains, pins and make-before-break
// steps), commits them to the store fenced by the job's lease, and
// publishes each generation to its streams (package watch). It also
// serves the job API (configuration, history, why a key is where it is,
// deletion), the load and readiness reports, task registration, and, for
// strongly consistent jobs, the guard and bridge leases tasks read.
//
// Several Assigners may share one store (etcd). One Assigner at a time
// writes a job: the holder of the job's lease (package lease), which the
// lease manager grants to one holder for a TTL (--job-lease-ttl), with an
// epoch above every epoch granted for the job before. Proximity decides
// who tries to take it: each Assigner's lease.Leader asks for the leases
// of the jobs it is preferred for (the live Assigner nearest the job's
// tasks by gossip's network coordinates, lease.Preference, which every
// Assigner, Distributor and Slicelet computes alike), adopts a job whose
// preferred Assigner does not generate it, and gives a lease up once
// another live Assigner is preferred. An Assigner that gains a lease
// re-reads the stored record and commits a takeover generation before it
// decides for the job; the others follow the store, serve reads from it,
// and forward load reports, configuration writes and deletions to the
// holder (lease.Leader.Target), or to the preferred Assigner while nobody
// holds the lease.
//
// Every commit of an assignment is fenced by the job lease: the Assigner
// checks it still holds the lease just before writing, and the store
// applies the commit only if the lease's epoch is still the newest granted
// (storage.Fencer, checked in the same bbolt or etcd transaction as the
// write). An Assigner that was paused or partitioned past its lease
// therefore cannot commit once another holds the job, however late its
// write arrives; it gets storage.ErrFenced, drops the lease and stops
// deciding for the job. The commit is also conditional on the generation
// it read, so an Assigner whose view of the store is behind (say, a new
// holder whose watch has not yet delivered its predecessor's last commit)
// gets storage.ErrConflict, re-reads and decides again: generations only
// grow, and none is lost or committed twice. Configuration writes are not
// fenced; they replace the stored configuration whole, and the holder
// rebalances under it.
//
// For a strongly consistent job the holder also moves the job's guard and
// bridge leases, which tell its tasks which keys they may serve (see
// docs/consistency.md), with package lease/guard's driver. Those steps are fenced by the same job lease: the
// manager refuses them under a lease that is no longer the job's
// (lease.ErrLost), so an Assigner that lost the job cannot move the guard,
// and the next holder carries on from the guard and bridge it finds.
//
// It must not open the store, the lease manager or any listener: the agent
// (package roles) builds those and hands them in, with a Config of the
// settings it uses.
package assigner
