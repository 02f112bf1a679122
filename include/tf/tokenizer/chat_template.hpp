#pragma once
/// Chat templates: renders a model's tokenizer.chat_template over OpenAI-style messages, the way
/// Hugging Face's apply_chat_template does.
#include <tf/error.hpp>
#include <tf/jinja/template.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace tf::tokenizer {

/// Renders `template_src` with `messages` (a JSON array) and `options`: add_generation_prompt
/// (default false), tools (default none), bos_token, eos_token, enable_thinking and any other
/// keys, all passed to the template as top-level variables (like apply_chat_template's kwargs).
/// Use nlohmann::ordered_json to keep the documents' key order (tojson output depends on it).
/// Throws tf::error on a malformed template or when the template raises.
template <class Json>
std::string render_chat(std::string_view template_src, const Json& messages, const Json& options,
                        const jinja::render_options& ro = {}) {
  if (!messages.is_array())
    throw tf::error("render_chat: messages must be a JSON array, got {}", messages.type_name());
  if (!options.is_null() && !options.is_object())
    throw tf::error("render_chat: options must be a JSON object, got {}", options.type_name());
  Json ctx = Json::object();
  ctx["messages"] = messages;
  ctx["tools"] = nullptr;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = false;
  if (options.is_object())
    for (auto it = options.begin(); it != options.end(); ++it) ctx[it.key()] = *it;
  return jinja::template_t(template_src).render_json(ctx, ro);
}

/// render_chat for nlohmann::json arguments (objects iterate in sorted key order).
inline std::string render_chat(std::string_view template_src, const nlohmann::json& messages,
                               const nlohmann::json& options) {
  return render_chat<nlohmann::json>(template_src, messages, options);
}

}  // namespace tf::tokenizer
