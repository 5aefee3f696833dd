#include "server/chat_page.h"

namespace rlm {

const std::string& chat_page_html() {
  // chat_page_html.inc is src/server/chat_page.html as a raw string literal, written by CMake.
  static const std::string html =
#include "chat_page_html.inc"
      ;
  return html;
}

}  // namespace rlm
