#pragma once
/// The KV pools families name in their traits, and the concept the ledger counts them through.
/// Complete types, so `family_check` can test a ledgerPool's pool against `ledger_countable`.
#include <tf/kv/hybrid_pool.hpp>       // kv::hybrid_pool: pages + recurrent slots (ledgerPool)
#include <tf/kv/ledger_countable.hpp>  // kv::ledger_countable
#include <tf/kv/paged_pool.hpp>        // kv::paged_pool: the engine's pool (kvPool)

namespace tf::kv {

static_assert(ledger_countable<paged_pool>);
static_assert(ledger_countable<hybrid_pool>);

}  // namespace tf::kv
