// The SQLite tuning DB (schema: schema/migrations/*.sql). Each commit is one IMMEDIATE
// transaction: a killed process loses at most the result it was writing, and the file
// stays consistent (WAL). Natural keys are resolved to row ids inside the transaction.
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "ir/error.h"
#include "migrate.h"
#include "records.h"
#include "tuning_db.h"
#include "variant.h"

namespace dc {

namespace {

// Columns of a Measurement, in measurement_from's order; aliases m, v, wk.
constexpr const char* kMeasurementColumns =
    "v.workload, v.key, m.source_hash, m.gpu_type, wk.name, m.status, m.error, m.samples_json, "
    "m.median_us, m.min_us, m.spread, m.max_rel_error, m.registers, m.spill_bytes, m.smem_bytes, "
    "m.compile_seconds, m.estimate_us, m.nvrtc_version, m.driver_version, m.emulated, "
    "m.attempts, m.finished_ms, m.n_samples, m.p10_us, m.p90_us, m.mean_us, m.mad_us, "
    "m.health_sm_clock_mhz, m.health_max_sm_clock_mhz, m.health_temperature_c, m.health_clock_event_reasons, "
    "m.health_ecc_uncorrected, m.health_note";
constexpr int kHealthColumn = 27;  // the first health column above

// The health columns of a measurement (migration 0008): NULL figures without health data.
struct HealthColumns {
  std::optional<int64_t> sm_clock_mhz, max_sm_clock_mhz, temperature_c, clock_event_reasons, ecc_uncorrected;
  std::optional<std::string> note;
};

HealthColumns health_columns(const DeviceHealthFigures& h) {
  HealthColumns c;
  if (!h.note.empty()) c.note = h.note;
  if (!h.sampled) return c;
  c.sm_clock_mhz = h.sm_clock_mhz;
  c.max_sm_clock_mhz = h.max_sm_clock_mhz;
  c.temperature_c = h.temperature_c;
  c.clock_event_reasons = static_cast<int64_t>(h.clock_event_reasons);
  if (h.ecc_known) c.ecc_uncorrected = h.ecc_uncorrected;
  return c;
}

// A sample is a row with an SM clock; anything else has no health data.
DeviceHealthFigures health_from(const sqlite::Query& q, int col) {
  DeviceHealthFigures h;
  h.sampled = !q.is_null(col);
  // No note: a row from before migration 0008, or one whose source gave no reason.
  h.note = q.is_null(col + 5) ? (h.sampled ? "" : "none recorded") : q.text(col + 5);
  if (!h.sampled) return h;
  h.sm_clock_mhz = q.int64(col);
  h.max_sm_clock_mhz = q.is_null(col + 1) ? 0 : q.int64(col + 1);
  h.temperature_c = q.is_null(col + 2) ? 0 : q.int64(col + 2);
  h.clock_event_reasons = q.is_null(col + 3) ? 0 : static_cast<uint64_t>(q.int64(col + 3));
  h.ecc_known = !q.is_null(col + 4);
  h.ecc_uncorrected = h.ecc_known ? q.int64(col + 4) : 0;
  return h;
}
constexpr const char* kMeasurementJoins =
    " FROM measurements m JOIN variants v ON v.id = m.variant_id"
    " JOIN workers wk ON wk.id = m.worker_id";

Measurement measurement_from(const sqlite::Query& q) {
  Measurement m;
  m.workload = q.text(0);
  m.variant_key = q.text(1);
  m.source_hash = q.text(2);
  m.gpu_type = q.text(3);
  m.worker = q.text(4);
  const auto status = parse_job_status(q.text(5));
  DC_USER_CHECK(status, "tuning DB holds an unknown job status '", q.text(5), "'");
  m.status = *status;
  m.error = q.text(6);
  m.samples_us = samples_from_json(q.text(7));
  m.median_us = q.real(8);
  m.min_us = q.real(9);
  m.spread = q.real(10);
  m.max_rel_error = q.real(11);
  m.registers = static_cast<int>(q.int64(12));
  m.spill_bytes = static_cast<int>(q.int64(13));
  m.smem_bytes = q.int64(14);
  m.compile_seconds = q.real(15);
  m.estimate_us = q.real(16);
  m.nvrtc_version = q.text(17);
  m.driver_version = q.text(18);
  m.emulated = q.int64(19) != 0;
  m.attempts = static_cast<int>(q.int64(20));
  m.finished_unix_ms = q.int64(21);
  m.n_samples = q.int64(22);
  m.p10_us = q.real(23);
  m.p90_us = q.real(24);
  m.mean_us = q.real(25);
  m.mad_us = q.real(26);
  m.health = health_from(q, kHealthColumn);
  return m;
}

class SqliteDb final : public TuningDb {
 public:
  SqliteDb(const std::string& path, bool read_only)
      : conn_(open_tuning_connection(path, read_only)), read_only_(read_only) {}

  std::unique_ptr<Batch> begin_batch() override {
    DC_USER_CHECK(!read_only_, "tuning DB '", conn_.path(), "' was opened read-only: cannot write a batch");
    return std::make_unique<SqliteBatch>(mu_, conn_);
  }

  void commit_gpu_type(const GpuSpec& s) override {
    auto tx = write("record GPU type " + s.name);
    conn_.query(
             "INSERT INTO gpu_types(name, arch, cc_major, cc_minor, spec_json, first_seen_ms) "
             "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET arch = excluded.arch, "
             "cc_major = excluded.cc_major, cc_minor = excluded.cc_minor, "
             "spec_json = excluded.spec_json")
        .bind_all(s.name, s.arch, s.cc_major, s.cc_minor, gpu_spec_to_json(s), now_unix_ms())
        .run();
    tx.commit();
  }

  void commit_worker(const WorkerInfo& w) override {
    auto tx = write("record worker " + w.name, sqlite::Transaction::Nested::plain);  // one upsert
    ids_.workers.erase(w.name);  // its emulated flag may change here
    require_gpu(w.gpu_type);
    const int64_t now = now_unix_ms();
    conn_.query(
             "INSERT INTO workers(name, host, device, gpu_type, driver_version, nvrtc_version, "
             "emulated, first_seen_ms, last_seen_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
             "ON CONFLICT(name) DO UPDATE SET host = excluded.host, device = excluded.device, "
             "gpu_type = excluded.gpu_type, driver_version = excluded.driver_version, "
             "nvrtc_version = excluded.nvrtc_version, emulated = excluded.emulated, "
             "last_seen_ms = excluded.last_seen_ms")
        .bind_all(w.name, w.host, w.device, w.gpu_type, w.driver_version, w.nvrtc_version,
                  w.emulated, now, now)
        .run();
    tx.commit();
  }

  int64_t commit_model(const std::string& name, const std::string& sha256) override {
    DC_INTERNAL_CHECK(sha256.size() == 64, "model sha256 '", sha256, "' is not 64 hex digits");
    auto tx = write("record model " + name);
    conn_.query(
             "INSERT INTO models(name, sha256, first_seen_ms) VALUES (?, ?, ?) "
             "ON CONFLICT(name, sha256) DO NOTHING")
        .bind_all(name, sha256, now_unix_ms())
        .run();
    sqlite::Query q = conn_.query("SELECT id FROM models WHERE name = ? AND sha256 = ?");
    q.bind_all(name, sha256);
    DC_INTERNAL_CHECK(q.step(), "model ", name, " vanished");
    const int64_t id = q.int64(0);
    q.run();
    tx.commit();
    return id;
  }

  void commit_workload(const WorkloadRecord& w) override {
    auto tx = write("record workload " + w.signature, sqlite::Transaction::Nested::plain);  // one insert
    insert_workload(w);
    tx.commit();
  }

  void commit_model_workloads(int64_t model_id,
                              const std::vector<std::pair<WorkloadRecord, int>>& ws) override {
    auto tx = write("record the workloads of a model");
    {
      sqlite::Query q = conn_.query("SELECT 1 FROM models WHERE id = ?");
      DC_INTERNAL_CHECK(q.bind(1, model_id).step(), "unknown model id ", model_id);
    }
    for (const auto& [w, count] : ws) {
      DC_INTERNAL_CHECK(count > 0, "workload ", w.signature, " counted ", count, " times");
      insert_workload(w);
      conn_.query(
               "INSERT INTO model_workloads(model_id, workload, count) VALUES (?, ?, ?) "
               "ON CONFLICT(model_id, workload) DO UPDATE SET count = excluded.count")
          .bind_all(model_id, w.signature, count)
          .run();
    }
    tx.commit();
  }

  bool commit_variant(const std::string& workload, const Variant& v,
                      const std::string& source_hash) override {
    const std::string key = v.key();
    auto tx = write("record variant " + key, sqlite::Transaction::Nested::plain);  // one write
    // The insert first: a variant new to the DB (a farm service's every job) costs one
    // statement, not a look-up and then the insert (round 7 of docs/bench/farm-service.md).
    // The workload's foreign key refuses a variant of a workload not committed.
    conn_.query(
             "INSERT INTO variants(workload, key, template, precision, params_json, source_hash, "
             "first_seen_ms) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(workload, key) DO NOTHING",
             &kept_.insert_variant)
        .bind_all(workload, key, v.template_name, v.precision, params_to_json(v), source_hash,
                  now_unix_ms())
        .run();
    if (conn_.changes() == 1) {
      // Its id for the measurement to come (take_variant_id), read from the insert.
      ids_.forget_if_stale(conn_);
      ids_.variants.insert_or_assign(workload + '\n' + key, conn_.last_insert_rowid());
      ids_.unmeasured.insert(conn_.last_insert_rowid());  // new: no measurement refers to it
      tx.commit();
      return true;
    }
    // Known already (a tune's variants again): written only if its source changed.
    std::string known_hash;
    {
      sqlite::Query q = conn_.query("SELECT source_hash FROM variants WHERE workload = ? AND key = ?");
      DC_INTERNAL_CHECK(q.bind_all(workload, key).step(), "variant ", key, " neither inserted nor found");
      known_hash = q.text(0);
    }
    if (known_hash != source_hash)
      conn_.query("UPDATE variants SET source_hash = ? WHERE workload = ? AND key = ?")
          .bind_all(source_hash, workload, key)
          .run();
    tx.commit();
    return false;
  }

  bool commit_measurement(const Measurement& in) override { return commit(in, /*first_only=*/false); }
  bool commit_first_measurement(const Measurement& in) override { return commit(in, /*first_only=*/true); }

  bool commit(const Measurement& in, bool first_only) {
    const Measurement m = checked_measurement(in);
    // Look-ups, then one insert: in a batch, no savepoint of its own.
    auto tx = write("record a measurement of " + m.variant_key, sqlite::Transaction::Nested::plain);
    ids_.forget_if_stale(conn_);
    const int64_t variant_id = take_variant_id(m.workload, m.variant_key);
    if (!ids_.gpu_types.count(m.gpu_type)) {
      require_gpu(m.gpu_type);
      ids_.gpu_types.insert(m.gpu_type);
    }
    int64_t worker_id = 0;
    auto wit = ids_.workers.find(m.worker);
    if (wit == ids_.workers.end()) {
      sqlite::Query q = conn_.query("SELECT id, emulated FROM workers WHERE name = ?");
      DC_INTERNAL_CHECK(q.bind(1, m.worker).step(), "measurement from unknown worker '", m.worker,
                        "': commit the worker first");
      wit = ids_.workers.emplace(m.worker, std::make_pair(q.int64(0), q.int64(1) != 0)).first;
    }
    DC_INTERNAL_CHECK(wit->second.second == m.emulated, "measurement from worker '", m.worker,
                      "' disagrees with it on being emulated");
    worker_id = wit->second.first;
    // A variant this connection inserted and nobody measured since needs no look-up for a
    // result that came first (the farm service's every job: IdCache::unmeasured).
    if (first_only && is_final_status(m.status) && !ids_.unmeasured.count(variant_id)) {
      static const std::string kFirstResult =
          "SELECT 1 FROM measurements WHERE variant_id = ? AND gpu_type = ? AND emulated = ? "
          "AND status NOT IN " + not_final_statuses_sql() + " AND nvrtc_major = ? AND source_hash = ? LIMIT 1";
      sqlite::Query q = conn_.query(kFirstResult);
      if (q.bind_all(variant_id, m.gpu_type, m.emulated, toolchain_major(m.nvrtc_version), m.source_hash).step())
        return false;  // another tune's result came first; the transaction rolls back
    }
    const HealthColumns h = health_columns(m.health);
    sqlite::Query ins = conn_.query(
        "INSERT INTO measurements(variant_id, gpu_type, worker_id, status, error, samples_json, "
        "n_samples, median_us, min_us, spread, max_rel_error, registers, spill_bytes, smem_bytes, "
        "compile_seconds, estimate_us, source_hash, nvrtc_version, nvrtc_major, driver_version, "
        "emulated, attempts, finished_ms, recorded_ms, p10_us, p90_us, mean_us, mad_us, health_sm_clock_mhz, "
        "health_max_sm_clock_mhz, health_temperature_c, health_clock_event_reasons, health_ecc_uncorrected, "
        "health_note) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(variant_id, gpu_type, worker_id, finished_ms) DO NOTHING",
        &kept_.insert_measurement);
    ins.bind_all(variant_id, m.gpu_type, worker_id, job_status_name(m.status), m.error,
                 samples_to_json(m.samples_us), m.n_samples,
                 m.median_us, m.min_us, m.spread, m.max_rel_error, m.registers, m.spill_bytes,
                 m.smem_bytes, m.compile_seconds, m.estimate_us, m.source_hash, m.nvrtc_version,
                 toolchain_major(m.nvrtc_version), m.driver_version, m.emulated, m.attempts,
                 m.finished_unix_ms, now_unix_ms(), m.p10_us, m.p90_us, m.mean_us, m.mad_us, h.sm_clock_mhz,
                 h.max_sm_clock_mhz, h.temperature_c, h.clock_event_reasons, h.ecc_uncorrected, h.note);
    ins.run();
    const bool added = conn_.changes() == 1;
    ids_.unmeasured.erase(variant_id);
    tx.commit();
    return added;
  }

  bool mark_implausible(const Measurement& m, const std::string& why) override {
    auto tx = write("mark a measurement of " + m.variant_key + " implausible");
    conn_.query(
             "UPDATE measurements SET status = 'implausible', error = ? WHERE status = 'ok' AND "
             "variant_id = (SELECT id FROM variants WHERE workload = ? AND key = ?) AND gpu_type = ? AND "
             "worker_id = (SELECT id FROM workers WHERE name = ?) AND finished_ms = ?")
        .bind_all(why, m.workload, m.variant_key, m.gpu_type, m.worker, m.finished_unix_ms)
        .run();
    const bool changed = conn_.changes() == 1;
    tx.commit();
    return changed;
  }

  int64_t begin_run(const RunInfo& run) override {
    auto tx = write("record the start of a tuning run");
    {
      sqlite::Query q = conn_.query("SELECT 1 FROM models WHERE id = ?");
      DC_INTERNAL_CHECK(q.bind(1, run.model_id).step(), "run of unknown model id ", run.model_id);
    }
    for (const auto& g : run.gpu_types) require_gpu(g);
    conn_.query(
             "INSERT INTO tuning_runs(uid, model_id, gpu_types_json, options_json, host, "
             "started_ms, status, precision) VALUES (?, ?, ?, ?, ?, ?, 'running', ?)")
        .bind_all(random_run_uid(), run.model_id, strings_to_json(run.gpu_types),
                  run.options_json, run.host, now_unix_ms(), run.precision)
        .run();
    const int64_t id = conn_.last_insert_rowid();
    tx.commit();
    return id;
  }

  void end_run(int64_t run_id, RunStatus status) override {
    auto tx = write("record the end of a tuning run");
    conn_.query("UPDATE tuning_runs SET ended_ms = ?, status = ? WHERE id = ?")
        .bind_all(now_unix_ms(), run_status_name(status), run_id)
        .run();
    DC_INTERNAL_CHECK(conn_.changes() == 1, "unknown run id ", run_id);
    tx.commit();
  }

  void commit_run_internal_errors(int64_t run_id, int64_t jobs, int64_t workloads) override {
    auto tx = write("record the internal errors of a tuning run");
    conn_.query("UPDATE tuning_runs SET internal_error_jobs = ?, internal_error_workloads = ? WHERE id = ?")
        .bind_all(jobs, workloads, run_id)
        .run();
    DC_INTERNAL_CHECK(conn_.changes() == 1, "unknown run id ", run_id);
    tx.commit();
  }

  void commit_plan(const PlanRecord& p) override {
    auto tx = write("record a plan");
    {
      sqlite::Query q = conn_.query("SELECT 1 FROM tuning_runs WHERE id = ?");
      DC_INTERNAL_CHECK(q.bind(1, p.run_id).step(), "plan of unknown run id ", p.run_id);
    }
    require_gpu(p.gpu_type);
    conn_.query(
             "INSERT INTO plans(run_id, gpu_type, emulated, choices_json, estimated_total_us, "
             "measured_total_us, created_ms, precision) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
             "ON CONFLICT(run_id, gpu_type) DO UPDATE SET emulated = excluded.emulated, "
             "precision = excluded.precision, "
             "choices_json = excluded.choices_json, "
             "estimated_total_us = excluded.estimated_total_us, "
             "measured_total_us = excluded.measured_total_us, created_ms = excluded.created_ms")
        .bind_all(p.run_id, p.gpu_type, p.source == TimingSource::emulated,
                  plan_choices_to_json(p.choices), p.estimated_total_us, p.measured_total_us,
                  now_unix_ms(), p.precision)
        .run();
    tx.commit();
  }

  void commit_gpu_busy(const std::vector<GpuBusyRecord>& records) override {
    auto tx = write("record the GPU busy time of a tuning run");
    for (const auto& r : records) {
      require_gpu(r.gpu_type);
      DC_INTERNAL_CHECK(r.busy_seconds >= 0 && r.measure_seconds > 0, "busy record of worker '",
                        r.worker, "': ", r.busy_seconds, " s busy over ", r.measure_seconds, " s");
      conn_.query(
               "INSERT INTO run_gpu_busy(run_id, gpu_type, worker_id, busy_seconds, "
               "measure_seconds) SELECT ?1, ?2, w.id, ?4, ?5 FROM workers w WHERE w.name = ?3 "
               "ON CONFLICT(run_id, gpu_type, worker_id) DO UPDATE SET "
               "busy_seconds = excluded.busy_seconds, measure_seconds = excluded.measure_seconds")
          .bind_all(r.run_id, r.gpu_type, r.worker, r.busy_seconds, r.measure_seconds)
          .run();
      DC_INTERNAL_CHECK(conn_.changes() == 1, "busy record of unknown worker '", r.worker, "'");
    }
    tx.commit();
  }

  bool has_measurement(const std::string& workload, const std::string& variant_key,
                       const std::string& gpu_type, TimingSource source,
                       const std::string& nvrtc_major) const override {
    std::lock_guard lock(mu_);
    sqlite::Query q = conn_.query(
        "SELECT 1 FROM measurements m JOIN variants v ON v.id = m.variant_id "
        "WHERE v.workload = ?1 AND v.key = ?2 AND m.gpu_type = ?3 AND m.emulated = ?4 "
        "AND m.status NOT IN " + not_final_statuses_sql() + " AND (?5 = '' OR m.nvrtc_major = ?5) LIMIT 1");
    return q.bind_all(workload, variant_key, gpu_type, source == TimingSource::emulated, nvrtc_major)
        .step();
  }

  std::set<std::string> measured_variants(const std::string& workload, const std::string& gpu_type,
                                          TimingSource source,
                                          const std::string& nvrtc_major) const override {
    std::lock_guard lock(mu_);
    sqlite::Query q = conn_.query(
        "SELECT DISTINCT v.key FROM measurements m JOIN variants v ON v.id = m.variant_id "
        "WHERE v.workload = ?1 AND m.gpu_type = ?2 AND m.emulated = ?3 "
        "AND m.status NOT IN " + not_final_statuses_sql() + " AND (?4 = '' OR m.nvrtc_major = ?4)");
    q.bind_all(workload, gpu_type, source == TimingSource::emulated, nvrtc_major);
    std::set<std::string> out;
    while (q.step()) out.insert(q.text(0));
    return out;
  }

  std::map<std::string, std::set<std::string>> measured_source_hashes(
      const std::string& workload, const std::string& gpu_type, TimingSource source,
      const std::string& nvrtc_major) const override {
    std::lock_guard lock(mu_);
    sqlite::Query q = conn_.query(
        "SELECT DISTINCT v.key, m.source_hash FROM measurements m JOIN variants v ON v.id = m.variant_id "
        "WHERE v.workload = ?1 AND m.gpu_type = ?2 AND m.emulated = ?3 "
        "AND m.status NOT IN " + not_final_statuses_sql() + " AND (?4 = '' OR m.nvrtc_major = ?4)");
    q.bind_all(workload, gpu_type, source == TimingSource::emulated, nvrtc_major);
    std::map<std::string, std::set<std::string>> out;
    while (q.step()) out[q.text(0)].insert(q.text(1));
    return out;
  }

  std::vector<Measurement> query(const MeasurementQuery& f) const override {
    std::lock_guard lock(mu_);
    // Only the filters given, as plain equalities: SQLite then finds the rows through the
    // variants' (workload, key) and measurements_lookup indexes. "(?1 IS NULL OR ...)" forms
    // scanned every measurement for every query, and a farm service asks once per job.
    std::string where = " WHERE 1";
    if (f.workload) where += " AND v.workload = ?1";
    if (f.variant_key) where += " AND v.key = ?2";
    if (f.gpu_type) where += " AND m.gpu_type = ?3";
    if (f.worker) where += " AND wk.name = ?4";
    if (f.source) where += " AND m.emulated = ?5";
    if (f.status) where += " AND m.status = ?6";
    if (f.current_source_only) where += " AND m.source_hash = v.source_hash";
    sqlite::Query q = conn_.query(std::string("SELECT ") + kMeasurementColumns + kMeasurementJoins + where +
                                  " ORDER BY m.finished_ms, m.id LIMIT ?7");
    if (f.workload) q.bind(1, *f.workload);
    if (f.variant_key) q.bind(2, *f.variant_key);
    if (f.gpu_type) q.bind(3, *f.gpu_type);
    if (f.worker) q.bind(4, *f.worker);
    if (f.source) q.bind(5, *f.source == TimingSource::emulated);
    if (f.status) q.bind(6, job_status_name(*f.status));
    q.bind(7, f.limit);
    std::vector<Measurement> out;
    while (q.step()) out.push_back(measurement_from(q));
    return out;
  }

  std::optional<DbContentStamp> content_stamp() const override {
    std::lock_guard lock(mu_);
    return DbContentStamp{conn_.total_changes(), conn_.scalar_int("PRAGMA data_version"), conn_.rollbacks()};
  }

  std::vector<EstimatorSample> estimator_samples(const std::string& gpu_type, TimingSource source,
                                                 const std::string& storage) const override {
    std::lock_guard lock(mu_);
    // estimator_error's rows, each with its run (run_begun_by: one pass over the runs, not a
    // look-up per row).
    std::vector<std::pair<int64_t, int64_t>> runs;
    for (sqlite::Query r = conn_.query("SELECT started_ms, id FROM tuning_runs ORDER BY started_ms, id"); r.step();)
      runs.emplace_back(r.int64(0), r.int64(1));
    sqlite::Query q = conn_.query(
        "SELECT o.workload, o.kind, o.variant_key, o.median_us / o.estimate_us, o.estimate_us, o.finished_ms "
        "FROM ok_measurements o JOIN workload_storage s ON s.signature = o.workload "
        "WHERE o.gpu_type = ?1 AND o.source = ?2 AND (?3 = '' OR s.storage = ?3) "
        "  AND o.estimate_us > 0 AND o.median_us > 0");
    q.bind_all(gpu_type, std::string(source_name(source)), storage);
    std::vector<EstimatorSample> out;
    while (q.step()) {
      const auto kind = parse_cluster_kind(q.text(1));
      DC_USER_CHECK(kind, "tuning DB holds an unknown workload kind '", q.text(1), "'");
      out.push_back({q.text(0), *kind, q.text(2), q.real(3), q.real(4), run_begun_by(runs, q.int64(5))});
    }
    return out;
  }

  std::optional<WorkloadRecord> find_workload(const std::string& signature) const override {
    std::lock_guard lock(mu_);
    sqlite::Query q = conn_.query(
        "SELECT kind, canonical, flops, bytes, base_signature FROM workloads WHERE signature = ?");
    if (!q.bind(1, signature).step()) return std::nullopt;
    const auto kind = parse_cluster_kind(q.text(0));
    DC_USER_CHECK(kind, "tuning DB holds an unknown workload kind '", q.text(0), "'");
    return WorkloadRecord{signature, *kind, q.text(1), q.int64(2), q.int64(3), q.text(4)};
  }

  std::vector<std::pair<std::string, int>> model_workloads(int64_t model_id) const override {
    std::lock_guard lock(mu_);
    sqlite::Query q = conn_.query(
        "SELECT workload, count FROM model_workloads WHERE model_id = ? ORDER BY workload");
    q.bind(1, model_id);
    std::vector<std::pair<std::string, int>> out;
    while (q.step()) out.emplace_back(q.text(0), static_cast<int>(q.int64(1)));
    return out;
  }

  std::vector<GpuTypeRecord> gpu_types() const override {
    std::lock_guard lock(mu_);
    sqlite::Query q =
        conn_.query("SELECT name, arch, cc_major, cc_minor FROM gpu_types ORDER BY name");
    std::vector<GpuTypeRecord> out;
    while (q.step())
      out.push_back({q.text(0), q.text(1), static_cast<int>(q.int64(2)),
                     static_cast<int>(q.int64(3))});
    return out;
  }

  std::vector<RunRecord> runs() const override {
    std::lock_guard lock(mu_);
    std::vector<RunRecord> out;
    {
      sqlite::Query q = conn_.query(
          "SELECT id, uid, model_id, gpu_types_json, options_json, host, started_ms, "
          "ifnull(ended_ms, 0), status, precision, internal_error_jobs, internal_error_workloads "
          "FROM tuning_runs ORDER BY id");
      while (q.step()) {
        RunRecord r;
        r.id = q.int64(0);
        r.uid = q.text(1);
        r.info.model_id = q.int64(2);
        r.info.gpu_types = {q.text(3)};  // JSON, expanded below
        r.info.options_json = q.text(4);
        r.info.host = q.text(5);
        r.started_ms = q.int64(6);
        r.ended_ms = q.int64(7);
        const auto status = parse_run_status(q.text(8));
        DC_USER_CHECK(status, "tuning DB holds an unknown run status '", q.text(8), "'");
        r.status = *status;
        r.info.precision = q.text(9);
        r.internal_error_jobs = q.int64(10);
        r.internal_error_workloads = q.int64(11);
        out.push_back(std::move(r));
      }
    }
    for (RunRecord& r : out) {
      sqlite::Query q = conn_.query("SELECT value FROM json_each(?) ORDER BY key");
      q.bind(1, r.info.gpu_types.front());
      r.info.gpu_types.clear();
      while (q.step()) r.info.gpu_types.push_back(q.text(0));
    }
    return out;
  }

  std::vector<GpuBusyRecord> gpu_busy(int64_t run_id) const override {
    std::lock_guard lock(mu_);
    sqlite::Query q = conn_.query(
        "SELECT b.gpu_type, w.name, b.busy_seconds, b.measure_seconds FROM run_gpu_busy b "
        "JOIN workers w ON w.id = b.worker_id WHERE b.run_id = ? ORDER BY b.gpu_type, w.name");
    q.bind(1, run_id);
    std::vector<GpuBusyRecord> out;
    while (q.step()) out.push_back({run_id, q.text(0), q.text(1), q.real(2), q.real(3)});
    return out;
  }

  std::vector<PlanRecord> plans(int64_t run_id) const override {
    std::lock_guard lock(mu_);
    std::vector<std::pair<PlanRecord, std::string>> rows;  // with choices_json
    {
      sqlite::Query q = conn_.query(
          "SELECT gpu_type, emulated, choices_json, estimated_total_us, measured_total_us, "
          "precision FROM plans WHERE run_id = ? ORDER BY gpu_type");
      q.bind(1, run_id);
      while (q.step()) {
        PlanRecord p;
        p.run_id = run_id;
        p.gpu_type = q.text(0);
        p.source = source_of(q.int64(1) != 0);
        p.estimated_total_us = q.real(3);
        p.measured_total_us = q.real(4);
        p.precision = q.text(5);
        rows.emplace_back(std::move(p), q.text(2));
      }
    }
    std::vector<PlanRecord> out;
    for (auto& [p, json] : rows) {
      sqlite::Query q = conn_.query(
          "SELECT json_extract(value, '$.cluster'), json_extract(value, '$.workload'), "
          "json_extract(value, '$.variant'), json_extract(value, '$.estimated_us'), "
          "json_extract(value, '$.measured_us') FROM json_each(?) ORDER BY key");
      q.bind(1, json);
      while (q.step()) p.choices.push_back({q.text(0), q.text(1), q.text(2), q.real(3), q.real(4)});
      out.push_back(std::move(p));
    }
    return out;
  }

 private:
  // The lock is recursive: a batch holds it while its thread's writes and reads come and go.
  using Mutex = std::recursive_mutex;

  // A batch: the lock and an outer transaction for as long as it lives; the writes inside
  // it are savepoints (sqlite::Transaction).
  struct SqliteBatch final : Batch {
    std::unique_lock<Mutex> lock;
    sqlite::Transaction tx;
    SqliteBatch(Mutex& mu, sqlite::Connection& conn) : lock(mu), tx(conn) {}
    void commit() override { tx.commit(); }
  };

  // A write: the lock, then the transaction (declared in this order, destroyed in reverse).
  // `Nested::plain` for a write whose only change is its last statement: inside a batch it
  // takes no savepoint (sqlite::Transaction).
  struct Write {
    std::unique_lock<Mutex> lock;
    sqlite::Transaction tx;
    void commit() { tx.commit(); }
  };
  Write write(const std::string& what,
              sqlite::Transaction::Nested nested = sqlite::Transaction::Nested::savepoint) {
    std::unique_lock lock(mu_);
    DC_USER_CHECK(!read_only_, "tuning DB '", conn_.path(), "' was opened read-only: cannot ",
                  what);
    return Write{std::move(lock), sqlite::Transaction(conn_, nested)};
  }

  void insert_workload(const WorkloadRecord& w) {
    conn_.query(
             "INSERT INTO workloads(signature, kind, canonical, flops, bytes, first_seen_ms, "
             "base_signature) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(signature) DO NOTHING")
        .bind_all(w.signature, cluster_kind_name(w.kind), w.canonical, w.flops, w.bytes,
                  now_unix_ms(), w.base_signature.empty() ? w.signature : w.base_signature)
        .run();
  }

  // Row ids the measurement insert would otherwise look up by name for every row (three
  // look-ups a row were a good part of the farm service's CPU: docs/bench/farm-service.md).
  // Rows are never deleted while a DB is in use (dc-db transfer writes a copy), so an id
  // stays true unless the transaction that wrote or read it was rolled back: then all are
  // forgotten. Bounded like the service's caches: emptied at kMaxIds.
  struct IdCache {
    static constexpr size_t kMaxIds = size_t{1} << 14;
    uint64_t rollbacks = 0;  // the connection's count when these were read
    std::unordered_map<std::string, int64_t> variants;  // workload + '\n' + key
    std::unordered_map<std::string, std::pair<int64_t, bool>> workers;  // id, emulated
    std::unordered_set<std::string> gpu_types;
    // Ids of variants this connection inserted that have no measurement yet: this connection
    // wrote none, and no other connection (a second tune, dc-db merge) has committed since
    // (Connection::commits_by_others). A first-only measurement of one skips its look-up.
    std::unordered_set<int64_t> unmeasured;
    uint64_t commits_by_others = 0;  // the connection's count when `unmeasured` was true
    void forget_if_stale(const sqlite::Connection& conn) {
      if (conn.commits_by_others() != commits_by_others) {
        commits_by_others = conn.commits_by_others();
        unmeasured.clear();
      }
      const uint64_t now = conn.rollbacks();
      if (now == rollbacks && variants.size() < kMaxIds && workers.size() < kMaxIds &&
          unmeasured.size() < kMaxIds)
        return;
      rollbacks = now;
      variants.clear();
      workers.clear();
      gpu_types.clear();
      unmeasured.clear();
    }
  };

  // A variant's id for a measurement of it: kept from commit_variant's insert until the first
  // measurement takes it, else looked up. Taken, not kept: the cache holds the variants that
  // wait for a result (a farm service's jobs in flight), not every variant inserted, and is
  // not emptied at kMaxIds under the service's load (a look-up for every job then in flight).
  int64_t take_variant_id(const std::string& workload, const std::string& key) {
    std::string name;
    name.reserve(workload.size() + key.size() + 1);
    name.append(workload).append(1, '\n').append(key);
    if (const auto it = ids_.variants.find(name); it != ids_.variants.end()) {
      const int64_t id = it->second;
      ids_.variants.erase(it);
      return id;
    }
    sqlite::Query q = conn_.query("SELECT id FROM variants WHERE workload = ? AND key = ?");
    DC_INTERNAL_CHECK(q.bind_all(workload, key).step(), "measurement of unknown variant ", key,
                      " of workload ", workload, ": commit the variant first");
    return q.int64(0);
  }

  void require_gpu(const std::string& name) {
    sqlite::Query q = conn_.query("SELECT 1 FROM gpu_types WHERE name = ?");
    DC_INTERNAL_CHECK(q.bind(1, name).step(), "unknown GPU type '", name,
                      "': commit the GPU type first");
  }

  mutable Mutex mu_;
  mutable sqlite::Connection conn_;
  bool read_only_;
  IdCache ids_;  // under mu_
  // The statements of a farm service's every job, kept (sqlite::Connection::query); conn_'s.
  struct Kept {
    sqlite3_stmt* insert_variant = nullptr;
    sqlite3_stmt* insert_measurement = nullptr;
  } kept_;  // under mu_
};

}  // namespace

std::unique_ptr<TuningDb> open_tuning_db(const std::string& path, bool read_only) {
  return std::make_unique<SqliteDb>(path, read_only);
}

}  // namespace dc
