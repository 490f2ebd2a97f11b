"""The Qwen3-VL Instruct chat template (spec QWEN3VL.md §8), written from the spec's
description; the tools branch is left out.

The Qwen3 (text) template that ships in the tokenizer_config.json of the npm tokenizer package
is NOT this one (it has <think> handling and no image/video items), so make_checkpoint.py writes
this string into the checkpoint's tokenizer_config.json and chat_template.json.

Behaviour:
- no default system message; a system turn only when messages[0].role == "system":
  "<|im_start|>system\\n{text}<|im_end|>\\n";
- user turn: "<|im_start|>user\\n" + content items in order + "<|im_end|>\\n", where an item is
  image -> "<|vision_start|><|image_pad|><|vision_end|>",
  video -> "<|vision_start|><|video_pad|><|vision_end|>",
  text  -> the text verbatim
  (with add_vision_id, prefixed "Picture {n}: " / "Video {n}: ", counted over the conversation);
- content may be a plain string or a list of items; an item is an image if its type is "image"
  or it has an "image"/"image_url" key, a video if its type is "video" or it has a "video" key,
  text if it has a "text" key;
- assistant turn: "<|im_start|>assistant\\n{text}<|im_end|>\\n";
- a later system message renders like a user turn with role "system";
- add_generation_prompt appends "<|im_start|>assistant\\n" (no <think>).
"""

QWEN3VL_CHAT_TEMPLATE = (
    "{%- set image_count = namespace(value=0) -%}"
    "{%- set video_count = namespace(value=0) -%}"
    "{%- macro render_content(content, count_vision) -%}"
    "{%- if content is string -%}"
    "{{- content -}}"
    "{%- else -%}"
    "{%- for item in content -%}"
    "{%- if item.type == 'image' or 'image' in item or 'image_url' in item -%}"
    "{%- if count_vision -%}{%- set image_count.value = image_count.value + 1 -%}{%- endif -%}"
    "{%- if add_vision_id -%}{{- 'Picture ' ~ image_count.value ~ ': ' -}}{%- endif -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item.type == 'video' or 'video' in item -%}"
    "{%- if count_vision -%}{%- set video_count.value = video_count.value + 1 -%}{%- endif -%}"
    "{%- if add_vision_id -%}{{- 'Video ' ~ video_count.value ~ ': ' -}}{%- endif -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in item -%}"
    "{{- item.text -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' and loop.first -%}"
    "{{- '<|im_start|>system\\n' -}}{{- render_content(message.content, false) -}}{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'user' or message.role == 'system' -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}{{- render_content(message.content, true) -}}{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}{{- render_content(message.content, false) -}}{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)
