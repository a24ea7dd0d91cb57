// The block emitter: one graph-defined op as a CUDA kernel (kernel.cpp: its skeleton and
// declarations; steps.cpp: the steps; mma.cpp: tensor-core products and fragment chains),
// implementing its block graph exactly as block_graph.h specifies, with the placement and order its
// BlockSchedule decided.
//
// Kernel shape: input tiles are copied into shared memory (invariant tiles once, loop tiles
// through a cp.async ring of `pipeline_stages` stages prefetched ahead), then the schedule's
// steps run: each Compute/Accumulate/Save step loops over the elements of its tile in its
// distribution (strided elements, lane groups that reduce with shuffles, or the mma.sync fragment
// layout), computes the tile's expression (inline ops, at most one matmul/reduction root) and
// stores, accumulates into registers, or writes device memory.
#pragma once

#include <algorithm>
#include <functional>

#include "../emit_internal.h"
#include "kiln/ir/diag.h"

namespace kiln::cgen {

class BlockEmitter {
 public:
  BlockEmitter(const KernelGraph& g, const KernelOp& kop, const KernelPlan& kp)
      : g_(g),
        kop_(kop),
        kp_(kp),
        bg_(kp.block->retiled ? *kp.block->retiled : *kop.block),
        bs_(*kp.block),
        T_(bg_.block_threads) {}

  void emit(Code& out);

 private:
  // What the pipeline prologue found and did: invariant inputs, loop inputs, and whether a
  // pre-loop barrier already waited for the invariant copies.
  struct Prologue {
    bool any_inv = false, any_loop = false, pre_waited = false;
    // The whole loop fits the ring (stages of the loop <= pipeline stages): the prologue issues
    // every stage, each its own commit group, and the loop only waits (no refill, so a short
    // loop costs one memory latency, not one per S - 1 stages).
    bool whole = false;
    int in_flight = 0;  // ring groups the prologue commits after the invariant group
  };
  // The kernel's comment, shared-memory constant and signature, and its first declarations.
  void open_kernel(Code& out);
  // Issues the copies of ring stage `ch` (an expression) into ring slot `slot`.
  void load_stage(const std::string& ch, const std::string& slot);
  // Invariant loads, the ring's prologue, the pre-loop steps and hoisted A fragments.
  Prologue emit_prologue();
  // The loop over ring stages and its steps.
  void emit_loop(const Prologue& p);

  const BlockOp& op(int i) const { return bg_.ops[i]; }
  const TilePlan& tp(int i) const { return bs_.tiles[i]; }
  OpClass cls(int i) const { return op_info(op(i).kind).cls; }
  const std::string& nm(int i) const { return op(i).name; }

  std::string tmp() { return fmt::format("v{}", tmp_++); }

  // ---- declarations --------------------------------------------------------------------------
  void declare_tiles();

  void declare_fused();

  std::string reg_decl_dims(const Distribution& d) const {
    if (d.kind == DistKind::Mma) return fmt::format("[{}][{}][{}]", d.bw, d.mtw, d.ntw);
    return fmt::format("[{}]", d.slots(T_));
  }

  void declare_accumulators();

  // Loop indices of iteration variable `it` as prefix0.. (only dims with range > 1).
  void emit_loop_indices(const std::string& it, const std::string& prefix);

  // Start of the tile along tensor dim d: (g * L_d + l) * t_d.
  std::string tile_start(const std::vector<int>& imap, const std::vector<int>& fmap, int d,
                         int64_t t, const std::string& loop_prefix) const;

  void declare_loads();

  // ---- values --------------------------------------------------------------------------------
  struct Ctx {
    int root = -1;
    std::string root_val;
    std::function<std::string(int)> reg;  // slot expression of a register tile
    Code* body = nullptr;
  };

  std::string stored_read(int i, const std::vector<std::string>& idx) const;

  bool is_stored(int i) const {
    const TilePlan& t = tp(i);
    return op(i).kind == OpKind::Input || t.home == TileHome::Smem || t.home == TileHome::Global ||
           (t.home == TileHome::Registers && t.spill);
  }

  std::string value(int i, const std::vector<std::string>& idx, Ctx& cx);

  std::string compute(int i, const std::vector<std::string>& idx, Ctx& cx);

  std::vector<std::string> reduce_input_index(int i, const std::vector<std::string>& idx,
                                              const std::string& k) const;

  // ---- steps ---------------------------------------------------------------------------------
  // What a step does with each element's value.
  using Sink =
      std::function<void(Ctx&, const std::vector<std::string>& idx, const std::string& slot)>;

  void emit_step(const Step& st);

  void emit_compute(int top);

  void emit_accumulate(const Step& st);

  // A Fragment tile p (see TileHome::Fragment): its root's fragments `fr` are computed, p is
  // evaluated in place, then each consumer runs from the registers: matmuls pack their A
  // fragments from `fr` (mma_block), row reductions sum the fragment row pieces and finish with a
  // quad shuffle (the four lanes 4g..4g+3 hold row g's columns).
  void emit_fragment_chain(int p);

  void emit_save(int top);

  void emit_spill(int a);

  // Loops over the elements of `top` (its shape) in distribution d, computing `root` first when
  // present, and calls sink with the element's index and register slot.
  void run_elements(int top, const Distribution& d, int root, bool uses_regs, const Sink& sink);

  // Runs emit() with its code held back, then writes the declarations of `decls` that it reads
  // and the code (see LazyDecls).
  template <class F>
  void emit_after_decls(const LazyDecls& decls, F&& emit) {
    Code body;
    Code* outer = c_;
    c_ = &body;
    emit();
    c_ = outer;
    decls.emit(*c_, body);
  }

  bool reads_registers(int top) const;

  void emit_reduce_root(int root, const std::vector<std::string>& ridx, int G,
                        const std::string& valid, Ctx& cx);

  // Matmul operand index: batch dims broadcast from the output's, then the two matrix dims.
  // An mma fragment gathered per element through value() (an operand ldmatrix cannot read: a
  // float32 tile, an inline expression): kiln::cg::`loader`<T>(frag, lane, f) asks f for each of
  // the lane's elements (r_, c_); rows are named `rn` (= rn0 + r_), columns `cn`, zero outside
  // R x C.
  void gather_fragment(const char* loader, const char* T, const char* frag, int operand,
                       const Shape& out, const std::vector<std::string>& bidx, const char* rn,
                       const char* cn, int64_t R, int64_t C);

  std::vector<std::string> matmul_operand_index(int operand, const Shape& out,
                                                const std::vector<std::string>& out_batch,
                                                const std::string& r, const std::string& c);

  void emit_fma_root(int root, const std::vector<std::string>& ridx, int G,
                     const std::string& valid, Ctx& cx);

  // ---- tensor cores --------------------------------------------------------------------------
  struct MmaOperand {
    int leaf = -1;
    bool swapped = false;
  };
  MmaOperand resolve(int i) const;

  // Pointer to batch `bidx` (output batch index vars) of a stored 16-bit leaf.
  std::string leaf_batch_ptr(const MmaOperand& mo, const Shape& out,
                             const std::vector<std::string>& out_batch) const;

  // A float32 stored leaf read row-major with an even pitch: the vector fragment loader applies.
  bool f32_rows(const MmaOperand& mo, int64_t K) const;
  int64_t f32_pitch(int leaf) const {
    const TilePlan& t = tp(leaf);
    const std::vector<int64_t>& st = t.home == TileHome::Registers ? t.spill_strides : t.strides;
    return st[st.size() - 2];
  }
  std::string f32_batch_ptr(const MmaOperand& mo, const Shape& out,
                            const std::vector<std::string>& out_batch) const;

  // Emits the mma.sync main loop of matmul `mm` (partition d) into fragments `frag`
  // (kiln::rt::FragC [bw][mtw][ntw]); declares and zeroes them when fresh.
  void mma_block(int mm, const Distribution& d, const std::string& frag, bool fresh);

  // Opens, for the warps of partition d, the loops over a warp's k steps (kstw of 16, below K)
  // and its batch slots, down to the body of one (kk, bi) with k0 and b set: kKstepScopes
  // scopes that the caller closes. Returns the index variables of batch slot b in `ob`.
  static constexpr int kKstepScopes = 6;
  std::vector<std::string> open_kstep_loops(const Distribution& d, int64_t kstw, int64_t K,
                                            const Shape& ob);

  // ldmatrix of the A fragment of matmul `mm` at (m0, k0) into `dst`, from its stored leaf.
  void ldmatrix_a(int mm, const MmaOperand& oa, int64_t M, const std::vector<std::string>& bidx,
                  const std::string& dst);

  // Declares ha_<mm> and loads it (the invariant tile must be in shared memory and visible).
  void emit_hoisted_a(int mm, const Distribution& d);

  // The quad shuffle a fragment-row reduction deferred to after the loop (emit_fragment_chain):
  // the four lanes of a row combine their accumulators, so every lane holds the row's value.
  void finish_quad(int a, const Distribution& dr);

  // Opens, for the warps of a row-reduction partition dr (n = 1), the loops over its batch
  // slots, m16 tiles and the two row halves h of a fragment (rows g and g + 8): kRowHalfScopes
  // scopes that the caller closes.
  static constexpr int kRowHalfScopes = 5;
  void open_row_half_loops(const Distribution& dr);

  void emit_warp_coords(const Distribution& d);

  // Opens the loops over a warp's mma fragments, `inner` being the innermost loop variable over
  // `inner_count` values, and the bounds check of the element at (b, row, col) that `col_expr`
  // and `row_expr` compute; leaves `o` (flat index) and the unravelled `idx` in `lazy` for the
  // caller to declare where its code reads them (emit_after_decls). Closes nothing: the caller
  // closes kFragmentScopes scopes.
  static constexpr int kFragmentScopes = 7;
  std::vector<std::string> open_fragment_loops(int top, const Distribution& d, int root,
                                               const char* inner, int inner_count,
                                               const std::string& row_expr,
                                               const std::string& col_expr, LazyDecls& lazy);

  void run_mma_elements(int top, const Distribution& d, int root, const Sink& sink);

  // The Mma distribution two adjacent columns at a time (fragment elements 2h and 2h + 1), for
  // paired 4- or 8-byte stores. sink gets one context per column and the first column's index.
  using PairSink = std::function<void(Ctx&, Ctx&, const std::vector<std::string>&)>;
  void run_mma_pairs(int top, const Distribution& d, int root, const PairSink& sink);

  const KernelGraph& g_;
  const KernelOp& kop_;
  const KernelPlan& kp_;
  const BlockGraph& bg_;
  const BlockSchedule& bs_;
  int T_;
  Code* c_ = nullptr;
  int tmp_ = 0;
  // Accumulators of fragment-row reductions whose quad shuffle runs after the loop.
  std::vector<std::pair<int, Distribution>> quad_pending_;
};

}  // namespace kiln::cgen
