#pragma once
/// serve::open_served: a model file through the family registry into a served_model (its engine
/// behind a lane host, and its text codec), sized by the caller once the family's costs are known
/// and before the weights load.
#include <families/registry.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/engine/open.hpp>
#include <tf/model/model_file.hpp>
#include <tf/serve/assistant_draft.hpp>
#include <tf/serve/lane_host.hpp>
#include <tf/serve/served_model.hpp>
#include <tf/tokenizer/text_codec.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace tf::serve {

/// What a start needs to know of a model before its weights load.
struct model_costs {
  std::string_view family;
  std::uint64_t kv_bytes_per_token = 0;      // K and V of every attention layer
  std::uint64_t state_bytes_per_stream = 0;  // recurrent state (0 without recurrent layers)
  /// The weights this process holds, where the start binds them before the budget (a rank's
  /// share of a split model); nullopt: the model file's size.
  std::optional<std::uint64_t> weight_bytes;
  /// Of weight_bytes, what was in memory already when the budget reads the machine (the slices
  /// the bind copied), which the reading no longer shows free.
  std::uint64_t weight_bytes_held = 0;
};

/// What the caller's budget grants: streams at once and KV pages.
struct pool_size {
  std::size_t parallel = 1;
  std::size_t pages = 0;
};

/// The open file first, then the engine whose weights point into it.
struct model_file_holder {
  std::unique_ptr<model::model_file> file;
};

/// An engine that owns its model file.
template <class F, class B>
struct file_engine : model_file_holder, engine<F, B> {
  file_engine(std::unique_ptr<model::model_file> f, kv_shape kv, typename B::options o)
      : model_file_holder{std::move(f)}, engine<F, B>(*file, kv, o) {}
};

/// The drafter in `path` that reads `target`'s own KV (family F's target_kv_drafter, as Gemma 4's
/// assistant), as a draft source keeping the last states of `streams` histories.
template <class F, class E>
std::shared_ptr<draft_source> open_target_kv_drafter(std::filesystem::path const& path, E& target,
                                                     std::size_t streams) {
  using B = std::remove_reference_t<decltype(target.backend())>;
  if constexpr (requires { typename F::template target_kv_drafter<B>; }) {
    // The drafter reads its file and refuses another architecture itself.
    return std::make_shared<assistant_draft>(
        std::make_unique<typename F::template target_kv_drafter<B>>(
            path, target.backend(), target.kv_store(), target.bound_weights()),
        std::max<std::size_t>(1, streams));
  } else {
    auto const arch =
        std::string(model::model_file::open(path, model::load_mode::map).architecture());
    throw error("tf: {} is a {} drafter, which reads its target's KV; the {} family runs none",
                path.string(), arch, F::name);
  }
}

/// Opens `path` (mapped, so the budget is read before a copy of the weights takes memory), asks
/// `size` for the pool given the family's costs, then loads (read into memory when
/// `o.load` says so) and serves it with `host` (its `parallel` set from `size`). A family with
/// recurrent state gets two slots per stream (its own and its lane's prompt-end snapshot), and a
/// third with drafts (the state before a verify row). A
/// non-empty `chat_template` replaces the file's (--chat-template); `drafts` are the lane host's
/// speculative drafts.
template <class Registry = families::builtin, class B = backend::cpu>
std::shared_ptr<served_model> open_served(std::filesystem::path const& path, open_options const& o,
                                          host_config host,
                                          std::function<pool_size(model_costs const&)> const& size,
                                          std::string const& chat_template = {},
                                          draft_config drafts = {}) {
  auto file =
      std::make_unique<model::model_file>(model::model_file::open(path, model::load_mode::map));
  std::shared_ptr<served_model> out;
  with_family<Registry, B>(*file, [&](auto family_type) {
    using F = typename decltype(family_type)::type;
    using E = file_engine<F, B>;
    auto const granted = size({F::name, E::kv_bytes_per_token(*file, o.kv),
                               E::state_bytes_per_stream(*file), std::nullopt, 0});
    host.parallel = granted.parallel;
    auto codec =
        tokenizer::load_codec(*file, path, path.filename().string(), builtin_chat_template<F>());
    if (!chat_template.empty())
      codec = tokenizer::text_codec(codec.tokens(), codec.model_id(), chat_template);
    if (o.load == model::load_mode::read)
      file = std::make_unique<model::model_file>(model::model_file::open(path, o.load));
    bool const drafting = drafts.source || !drafts.target_kv_drafter.empty();
    kv_shape const kv{
        static_cast<std::int32_t>(granted.pages), o.page_tokens, o.kv,
        E::has_state ? static_cast<std::int32_t>((drafting ? 3 : 2) * granted.parallel) : 0};
    auto e = std::make_unique<E>(std::move(file), kv, backend_options<B>(o));
    if (!drafts.target_kv_drafter.empty())
      drafts.source = open_target_kv_drafter<F>(drafts.target_kv_drafter, *e, granted.parallel);
    out = std::make_shared<lane_served_model<E, F, tokenizer::text_codec>>(
        std::move(e), std::move(codec), host, drafts);
  });
  return out;
}

}  // namespace tf::serve
