// The built-in chat page served at `/`: one static HTML file (src/server/chat_page.html, no build
// step, no external resources) compiled into the binary as a string. It streams answers from
// /v1/chat/completions, keeps the conversation, shows tokens/s and has a Stop button.
#pragma once

#include <string>

namespace rlm {

const std::string& chat_page_html();

}  // namespace rlm
