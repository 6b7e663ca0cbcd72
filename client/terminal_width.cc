#include "client/terminal_width.h"

#include <sys/ioctl.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace fsdpd::client {
namespace {

bool ContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

size_t TerminalColumns(int fd) {
  struct winsize size {};
  if (ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS"); columns != nullptr) {
    char* end = nullptr;
    const long value = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && value > 0 && value < 100000) {
      return static_cast<size_t>(value);
    }
  }
  return 80;
}

size_t DisplayColumns(std::string_view text) {
  size_t columns = 0;
  for (const char c : text) columns += ContinuationByte(c) ? 0 : 1;
  return columns;
}

std::string FitColumns(std::string_view text, size_t columns) {
  size_t used = 0;
  size_t end = 0;
  while (end < text.size()) {
    if (!ContinuationByte(text[end])) {
      if (used == columns) break;
      ++used;
    }
    ++end;
  }
  return std::string(text.substr(0, end));
}

std::vector<std::string> WrapColumns(std::string_view text, size_t columns, size_t indent) {
  if (columns == 0) return {std::string(text)};
  if (indent + 1 >= columns) indent = 0;  // too narrow to indent
  std::vector<std::string> lines;
  std::string line;       // the line being filled
  size_t used = 0;        // its columns
  bool has_word = false;  // whether it holds a word yet
  auto next_line = [&]() {
    lines.push_back(line);
    line.assign(indent, ' ');
    used = indent;
    has_word = false;
  };
  size_t start = 0;
  while (start < text.size()) {
    // The spaces before the next word: kept within a line, dropped where the line breaks.
    size_t gap = 0;
    while (start < text.size() && text[start] == ' ') ++start, ++gap;
    if (start == text.size()) break;
    size_t end = text.find(' ', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(start, end - start);
    start = end;
    size_t width = DisplayColumns(word);
    if (has_word && used + gap + width > columns) next_line();
    if (has_word || lines.empty()) {
      gap = std::min(gap, columns - used > 0 ? columns - used - 1 : 0);
      line.append(gap, ' ');
      used += gap;
    }
    // A word longer than the room left is cut.
    while (used + width > columns) {
      const std::string piece = FitColumns(word, columns - used);
      line += piece;
      word.remove_prefix(piece.size());
      width -= DisplayColumns(piece);
      next_line();
    }
    if (word.empty()) continue;
    line += std::string(word);
    used += width;
    has_word = true;
  }
  if (has_word || lines.empty()) lines.push_back(line);
  return lines;
}

}  // namespace fsdpd::client
