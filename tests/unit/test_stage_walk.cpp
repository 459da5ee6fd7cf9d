// StageWalk (src/kernels/gemm/stage_walk.h), the ring walk that gemm_tile's producer and consumers
// compute alike, run on the CPU against a model of what the GPU does with it: per stage a full and
// an empty mbarrier (phases counted, waits by parity as mbarrier.try_wait.parity does), TMA writes
// that land later than they are issued (visible once the full phase they count on completes), and
// consumer reads that last from the k block's wgmma until the stage is released (after the next
// k block's batch is issued, or at the tile's end). Random interleavings of the three, over random
// runs of tiles (kept or not, K up to two blocks past one ring, groups changing mid-run, empty
// grouped-K tiles), must never deadlock, never write bytes a read in flight still uses, and every
// read must find the operand block it expects, landed. Sequences of a CTA's tasks run the same way,
// each after the first starting fresh or carried into (the ring carry: the walk goes on, up to a ring
// of the next task's first k blocks loaded before the task before is done). (The twenty-fifth session's partial keep,
// since removed, was written against this model first; mutations of its drain, ring length and
// stage reset each failed it.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm/stage_walk.h"

namespace {

using kosmos::kernels::gemm::detail::kKeepA;
using kosmos::kernels::gemm::detail::kKeepB;
using kosmos::kernels::gemm::detail::kKeepNone;
using kosmos::kernels::gemm::detail::StageWalk;

// A tile shape's ring: stages and the bytes of one A / B k block (gemm_tile.cuh, TileConfig).
template <int kBM, int kBN, int kBK, int kStages_>
struct RingGeometry {
  static constexpr int kStages = kStages_;
  static constexpr int kStageBytesA = kBM * kBK * 2;
  static constexpr int kStageBytesB = kBN * kBK * 2;
};

struct TileSpec {
  int num_kb;
  bool along_n;
  int group;
  bool keep;
  int a_id, b_id;  // identity of the tile's A / B operand (equal ids: the same data)
  // The first tile of a task after the first (the CTA's next task, gemm_tile.cuh "Ring carry"):
  // kCarried -- the walk goes on (new_task), the previous task's producer loads up to carry_limit
  // of its k blocks before that task's consumers are done; kFresh -- the next call initialises
  // the barriers and starts a fresh walk, after everything before was consumed.
  int task_start = kSameTask;
  int carry_limit = 0;
  static constexpr int kSameTask = 0, kCarried = 1, kFresh = 2;
};

// What a byte range of shared memory holds.
struct Content {
  int64_t lo, hi;
  int op, id, kb;       // operand (0 = A, 1 = B), its identity, k block
  int stage;            // the full barrier whose phase makes it visible
  int64_t phase;        // ... that phase's index (visible once full[stage] completed more phases)
};

struct Read {
  int64_t lo, hi;
};

template <class Geo>
class Model {
 public:
  static constexpr int S = Geo::kStages;
  explicit Model(std::vector<TileSpec> tiles) : tiles_(std::move(tiles)), full_(S, 0), empty_(S, 0), expect_(S, 0), reads_(S) {}

  // Runs to the end under the interleaving chosen by rng; returns "" or what went wrong.
  std::string run(std::mt19937_64& rng) {
    for (int steps = 0; steps < 1000000; ++steps) {
      if (!error_.empty()) return error_;
      std::vector<int> can;
      if (producer_can()) can.push_back(0);
      if (consumer_can()) can.push_back(1);
      if (!pending_.empty()) can.push_back(2);
      if (can.empty()) {
        if (p_tile_ == int(tiles_.size()) && c_tile_ == int(tiles_.size())) return "";
        return "deadlock: producer at tile " + std::to_string(p_tile_) + " kb " + std::to_string(p_kb_) +
               ", consumers at tile " + std::to_string(c_tile_) + " kb " + std::to_string(c_kb_) + state();
      }
      const int who = can[std::uniform_int_distribution<size_t>(0, can.size() - 1)(rng)];
      if (who == 0) producer_step();
      else if (who == 1) consumer_step();
      else land(std::uniform_int_distribution<size_t>(0, pending_.size() - 1)(rng));
    }
    return "no end after 1e6 steps";
  }

 private:
  // The walks and barriers, for a deadlock's message.
  std::string state() const {
    std::string r = " (consumer walk: stage " + std::to_string(cw_.stage) + ", phase " + std::to_string(cw_.phase) +
                    ", kept " + std::to_string(cw_.kept) + "; producer walk: stage " + std::to_string(pw_.stage) +
                    ", phase " + std::to_string(pw_.phase) + ", kept " + std::to_string(pw_.kept) + "; full phases";
    for (int s = 0; s < S; ++s) r += " " + std::to_string(full_[s]);
    r += "; empty phases";
    for (int s = 0; s < S; ++s) r += " " + std::to_string(empty_[s]);
    return r + ")";
  }
  // mbarrier.try_wait.parity(P) passes once the phase of parity P completed: completed & 1 != P.
  static bool passes(int64_t completed, uint32_t parity) { return (completed & 1) != int64_t(parity); }

  int64_t a_lo(int i) const { return int64_t(i) * Geo::kStageBytesA; }
  int64_t b_lo(int j) const { return int64_t(S) * Geo::kStageBytesA + int64_t(j) * Geo::kStageBytesB; }

  // --- producer (warp 0 lane 0) ---
  bool producer_can() {
    if (p_tile_ == int(tiles_.size())) return false;
    const TileSpec& t = tiles_[p_tile_];
    if (!p_started_) {
      // A fresh call starts after the previous task's consumers are done and its loads landed.
      if (t.task_start == TileSpec::kFresh) return c_tile_ == p_tile_ && !c_started_ && pending_.empty();
      return true;
    }
    // A carried tile: the previous task's producer stops after carry_limit k blocks; the rest are
    // the next call's, which starts once the previous task's consumers are done.
    if (t.task_start == TileSpec::kCarried && c_tile_ < p_tile_ && !p_drain_ && p_kb_ >= t.carry_limit &&
        p_kb_ < t.num_kb)
      return false;
    if (p_drain_) {
      for (int s = 0; s < S; ++s)
        if (!passes(empty_[s], pw_.next_parity(s) ^ 1u)) return false;
      return true;
    }
    if (p_kb_ == tiles_[p_tile_].num_kb) return true;  // tile done
    const int s = pw_.stage;
    return passes(empty_[s], pw_.next_parity(s) ^ 1u);
  }
  void producer_step() {
    const TileSpec& t = tiles_[p_tile_];
    if (!p_started_) {
      if (t.task_start == TileSpec::kCarried) pw_.new_task();
      if (t.task_start == TileSpec::kFresh) {  // mbarrier.init of every stage, a fresh walk on both sides
        std::fill(full_.begin(), full_.end(), 0);
        std::fill(empty_.begin(), empty_.end(), 0);
        std::fill(expect_.begin(), expect_.end(), 0);
        mem_.clear();
        pw_ = StageWalk<Geo::kStages>{};
        cw_ = StageWalk<Geo::kStages>{};
      }
      bool load_kept = false, drain = false;
      p_kept_ = pw_.start_tile(t.keep, t.num_kb, t.along_n, t.group, load_kept, drain);
      p_load_kept_ = load_kept;
      p_drain_ = drain;
      p_started_ = true;
      p_kb_ = 0;
      return;
    }
    if (p_drain_) {
      p_drain_ = false;
      return;
    }
    if (p_kb_ == t.num_kb) {
      ++p_tile_;
      p_started_ = false;
      return;
    }
    const int s = pw_.stage;
    const bool skip_a = p_kept_ == kKeepA && !p_load_kept_, skip_b = p_kept_ == kKeepB && !p_load_kept_;
    const int64_t phase = expect_[s]++;  // arrive_and_expect_tx: this use of stage s
    int writes = 0;
    if (!skip_a) {
      const int i = pw_.a_index(p_kb_, s);
      write({a_lo(i), a_lo(i) + Geo::kStageBytesA, 0, t.a_id, p_kb_, s, phase});
      ++writes;
    }
    if (!skip_b) {
      const int j = pw_.b_index(p_kb_, s);
      write({b_lo(j), b_lo(j) + Geo::kStageBytesB, 1, t.b_id, p_kb_, s, phase});
      ++writes;
    }
    if (writes == 0) complete_full(s);  // nothing to land: the phase completes on the arrival
    else pending_writes_[s] += writes;
    ++p_kb_;
    pw_.advance();
  }
  void write(Content c) {
    if (c.lo < 0 || c.hi > int64_t(S) * (Geo::kStageBytesA + Geo::kStageBytesB)) {
      error_ = "write outside the ring: [" + std::to_string(c.lo) + ", " + std::to_string(c.hi) + ")";
      return;
    }
    for (int s = 0; s < S; ++s)
      for (const Read& r : reads_[s])
        if (r.lo < c.hi && c.lo < r.hi) {
          error_ = "tile " + std::to_string(p_tile_) + " kb " + std::to_string(c.kb) + " overwrites bytes [" +
                   std::to_string(c.lo) + ", " + std::to_string(c.hi) + ") that a read of stage " + std::to_string(s) +
                   " still uses";
          return;
        }
    pending_.push_back(c);
  }
  void land(size_t i) {
    Content c = pending_[i];
    pending_.erase(pending_.begin() + long(i));
    for (size_t k = 0; k < mem_.size();)
      if (mem_[k].lo < c.hi && c.lo < mem_[k].hi) mem_.erase(mem_.begin() + long(k));
      else ++k;
    mem_.push_back(c);
    if (--pending_writes_[c.stage] == 0) complete_full(c.stage);
  }
  void complete_full(int s) { ++full_[s]; }

  // --- consumers (both warpgroups in step; a stage is released when both are done with it) ---
  bool consumer_can() {
    if (c_tile_ == int(tiles_.size())) return false;
    // A fresh call's consumers start after its barrier init (the producer's reset here).
    if (!c_started_ && tiles_[c_tile_].task_start == TileSpec::kFresh) return p_tile_ > c_tile_ || (p_tile_ == c_tile_ && p_started_);
    if (!c_started_ || c_kb_ == tiles_[c_tile_].num_kb) return true;
    return passes(full_[cw_.stage], cw_.next_parity(cw_.stage));
  }
  void consumer_step() {
    const TileSpec& t = tiles_[c_tile_];
    if (!c_started_) {
      // A carried call's consumers start from the walk the record saved: the producer's after its
      // last load, moved on to the next task -- their own, moved on alike.
      if (t.task_start == TileSpec::kCarried) cw_.new_task();
      bool load_kept = false, drain = false;
      cw_.start_tile(t.keep, t.num_kb, t.along_n, t.group, load_kept, drain);
      c_started_ = true;
      c_kb_ = 0;
      prev_stage_ = -1;
      return;
    }
    if (c_kb_ == t.num_kb) {  // wgmma.wait_group 0, release the last stage
      if (prev_stage_ >= 0) release(prev_stage_);
      ++c_tile_;
      c_started_ = false;
      return;
    }
    const int s = cw_.stage;
    const int i = cw_.a_index(c_kb_, s), j = cw_.b_index(c_kb_, s);
    check_read(a_lo(i), a_lo(i) + Geo::kStageBytesA, 0, t.a_id);
    check_read(b_lo(j), b_lo(j) + Geo::kStageBytesB, 1, t.b_id);
    reads_[s].push_back({a_lo(i), a_lo(i) + Geo::kStageBytesA});
    reads_[s].push_back({b_lo(j), b_lo(j) + Geo::kStageBytesB});
    if (prev_stage_ >= 0) release(prev_stage_);  // after this k block's batch is issued: wait_group 1
    prev_stage_ = s;
    ++c_kb_;
    cw_.advance();
  }
  void check_read(int64_t lo, int64_t hi, int op, int id) {
    for (const Content& c : mem_) {
      if (c.lo == lo && c.hi == hi) {
        if (c.op != op || c.id != id || c.kb != c_kb_) {
          error_ = "tile " + std::to_string(c_tile_) + " kb " + std::to_string(c_kb_) + " reads " + (op ? "B" : "A") +
                   " at [" + std::to_string(lo) + ", " + std::to_string(hi) + ") and finds " + (c.op ? "B" : "A") +
                   " id " + std::to_string(c.id) + " kb " + std::to_string(c.kb) + " (wants id " + std::to_string(id) + ")";
        } else if (full_[c.stage] <= c.phase) {
          error_ = "tile " + std::to_string(c_tile_) + " kb " + std::to_string(c_kb_) +
                   " reads bytes whose TMA write no barrier it waited on covers";
        }
        return;
      }
    }
    error_ = "tile " + std::to_string(c_tile_) + " kb " + std::to_string(c_kb_) + " reads " + (op ? "B" : "A") +
             " at [" + std::to_string(lo) + ", " + std::to_string(hi) + "): nothing landed there";
  }
  void release(int s) {
    reads_[s].clear();
    ++empty_[s];
  }

  std::vector<TileSpec> tiles_;
  std::vector<int64_t> full_, empty_, expect_;
  std::vector<int> pending_writes_ = std::vector<int>(S, 0);
  std::vector<std::vector<Read>> reads_;
  std::vector<Content> pending_, mem_;
  std::string error_;
  StageWalk<Geo::kStages> pw_, cw_;
  int p_tile_ = 0, p_kb_ = 0, p_kept_ = kKeepNone;
  bool p_started_ = false, p_load_kept_ = false, p_drain_ = false;
  int c_tile_ = 0, c_kb_ = 0, prev_stage_ = -1;
  bool c_started_ = false;
};

// A random run: down M (B shared within a group, A per tile) or along N (A shared, B per tile).
std::vector<TileSpec> random_run(std::mt19937_64& rng, int stages) {
  std::uniform_int_distribution<int> pick(0, 99);
  const int count = 1 + pick(rng) % 8;
  const bool along_n = pick(rng) < 40;
  // K blocks near one ring, where the modes change: 0 (an empty grouped-K group), S - 1 .. S + 2.
  auto kb_of = [&] {
    const int r = pick(rng);
    return r < 5 ? 0 : r < 15 ? 1 : stages - 1 + (r % 4);
  };
  std::vector<TileSpec> tiles;
  int group = 0, id = 1;
  int num_kb = kb_of();
  int a_id = id++, b_id = id++;
  for (int i = 0; i < count; ++i) {
    if (!along_n && i > 0 && pick(rng) < 30) {  // the next group: new B, new K
      ++group;
      b_id = id++;
      num_kb = kb_of();
    }
    TileSpec t{num_kb, along_n, along_n ? 0 : group, pick(rng) < 90, 0, 0};
    t.a_id = along_n ? a_id : id++;
    t.b_id = along_n ? id++ : b_id;
    tiles.push_back(t);
  }
  return tiles;
}

// Random tasks of one CTA: runs as above, each after the first starting carried or fresh.
std::vector<TileSpec> random_tasks(std::mt19937_64& rng, int stages) {
  std::uniform_int_distribution<int> pick(0, 99);
  const int tasks = 1 + pick(rng) % 4;
  std::vector<TileSpec> all;
  for (int k = 0; k < tasks; ++k) {
    std::vector<TileSpec> run = random_run(rng, stages);
    for (TileSpec& t : run) {  // fresh identities: no task shares an operand with another
      t.a_id += 1000 * (k + 1);
      t.b_id += 1000 * (k + 1);
    }
    if (k > 0) {
      run[0].task_start = pick(rng) < 70 ? TileSpec::kCarried : TileSpec::kFresh;
      const int most = std::min(run[0].num_kb, stages);
      run[0].carry_limit = most > 0 ? 1 + pick(rng) % most : 0;
      if (most == 0) run[0].task_start = TileSpec::kFresh;  // gemm_tile carries only tiles with k blocks
    }
    all.insert(all.end(), run.begin(), run.end());
  }
  return all;
}

// The model under four random interleavings of one tile sequence: "" or the first error.
template <class Geo>
std::string run_interleavings(const std::vector<TileSpec>& tiles, std::mt19937_64& rng) {
  for (int order = 0; order < 4; ++order) {
    Model<Geo> m(tiles);
    std::string err = m.run(rng);
    if (!err.empty()) return err;
  }
  return "";
}

template <class Geo>
void check_geometry_random_runs(const char* name, int runs) {
  std::mt19937_64 rng(0x5eed0000u + Geo::kStages * 131 + Geo::kStageBytesB);
  int kept_tiles = 0;
  for (int r = 0; r < runs; ++r) {
    std::vector<TileSpec> tiles = random_run(rng, Geo::kStages);
    for (const TileSpec& t : tiles) kept_tiles += t.keep && t.num_kb > 0 && t.num_kb <= Geo::kStages;
    ASSERT_EQ(run_interleavings<Geo>(tiles, rng), "")
        << name << ", run " << r << " (" << tiles.size() << " tiles, " << (tiles[0].along_n ? "along N" : "down M")
        << ", first tile " << tiles[0].num_kb << " k blocks)";
  }
  EXPECT_GT(kept_tiles, runs) << name << ": the runs should often keep an operand";
}

// The ring carry: one CTA's tasks in a row, the walk going on from one into the next (new_task)
// with up to a ring of the next task's first k blocks loaded before the task before is done, or
// a fresh ring. (Mutation: without new_task's stale mark a kept operand of the task before is taken
// for the next one's, and this fails.)
template <class Geo>
void check_geometry_random_tasks(const char* name, int runs) {
  std::mt19937_64 rng(0xca77u + Geo::kStages * 7 + Geo::kStageBytesB);
  int carried = 0;
  for (int r = 0; r < runs; ++r) {
    std::vector<TileSpec> tiles = random_tasks(rng, Geo::kStages);
    for (const TileSpec& t : tiles) carried += t.task_start == TileSpec::kCarried;
    ASSERT_EQ(run_interleavings<Geo>(tiles, rng), "") << name << ", tasks run " << r << " (" << tiles.size() << " tiles)";
  }
  EXPECT_GT(carried, runs / 2) << name << ": the task sequences should often carry";
}
TEST(StageWalk, CarriedTasksNeverOverwriteNorDeadlock) {
  check_geometry_random_tasks<RingGeometry<128, 256, 64, 4>>("128x256, 4 stages", 2000);
  check_geometry_random_tasks<RingGeometry<128, 128, 64, 6>>("128x128, 6 stages", 1000);
  check_geometry_random_tasks<RingGeometry<128, 64, 64, 8>>("128x64, 8 stages", 1000);
}

TEST(StageWalk, RandomRunsNeverOverwriteNorDeadlock128x256) {
  check_geometry_random_runs<RingGeometry<128, 256, 64, 4>>("128x256, 4 stages", 3000);
}
TEST(StageWalk, RandomRunsNeverOverwriteNorDeadlock128x128) {
  check_geometry_random_runs<RingGeometry<128, 128, 64, 6>>("128x128, 6 stages", 2000);
}
TEST(StageWalk, RandomRunsNeverOverwriteNorDeadlock128x64) {
  check_geometry_random_runs<RingGeometry<128, 64, 64, 8>>("128x64, 8 stages", 2000);
}

// The modes: up to one ring of k blocks keeps the shared operand (A along N, B down M), loading it
// with the first tile only; more k blocks, an empty tile or keep off keep nothing; a new group's B
// is loaded again, after a drain.
TEST(StageWalk, ModesOfARun) {
  StageWalk<4> w;
  bool load_kept, drain;
  EXPECT_EQ(w.start_tile(true, 4, false, 0, load_kept, drain), kKeepB);
  EXPECT_TRUE(load_kept && drain);
  EXPECT_EQ(w.b_index(3, 1), 3);
  EXPECT_EQ(w.a_index(3, 1), 1);
  EXPECT_EQ(w.start_tile(true, 4, false, 0, load_kept, drain), kKeepB);
  EXPECT_FALSE(load_kept || drain);
  EXPECT_EQ(w.start_tile(true, 3, false, 1, load_kept, drain), kKeepB);  // the next group's B
  EXPECT_TRUE(load_kept && drain);
  EXPECT_EQ(w.start_tile(true, 5, false, 2, load_kept, drain), kKeepNone);  // one block past the ring
  EXPECT_TRUE(drain);
  EXPECT_FALSE(load_kept);
  EXPECT_EQ(w.start_tile(true, 5, false, 2, load_kept, drain), kKeepNone);
  EXPECT_FALSE(load_kept || drain);
  EXPECT_EQ(w.start_tile(true, 2, true, 0, load_kept, drain), kKeepA);
  EXPECT_TRUE(load_kept && drain);
  EXPECT_EQ(w.a_index(1, 3), 1);
  EXPECT_EQ(w.b_index(1, 3), 3);
  EXPECT_EQ(w.start_tile(true, 0, true, 0, load_kept, drain), kKeepNone);  // empty grouped-K tile
  EXPECT_TRUE(drain);
  EXPECT_EQ(w.start_tile(false, 2, true, 0, load_kept, drain), kKeepNone);
  EXPECT_FALSE(load_kept || drain);
}

}  // namespace
