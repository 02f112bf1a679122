#pragma once
/// Forward declarations of the KV pools families name in their traits (see kv/ for the types).

namespace tf::kv {

class paged_pool;   // the engine's paged KV pool, counted by the ledger directly (kvPool)
class hybrid_pool;  // KV pages + recurrent-state slots, counted through ledger_countable

}  // namespace tf::kv
