#pragma once
/// Chat templates: renders a model's tokenizer.chat_template over OpenAI-style messages, the way
/// Hugging Face's apply_chat_template does, with a built-in Gemma 3 template for GGUFs without one.
#include <tf/error.hpp>
#include <tf/jinja/template.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace tf::tokenizer {

/// Gemma 3's own chat template (google/gemma-3-*-it tokenizer_config.json), for GGUFs that carry
/// no tokenizer.chat_template (the default Gemma 3 270M GGUF has none).
inline constexpr std::string_view gemma3_chat_template = R"tfjinja({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
)tfjinja";

/// The GGUF's template when it has one, else the built-in Gemma 3 template.
inline std::string_view chat_template_or_fallback(std::string_view gguf_template) {
  return gguf_template.empty() ? gemma3_chat_template : gguf_template;
}

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
