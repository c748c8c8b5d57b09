#include "common/json.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace fa {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

void JsonWriter::before_value() {
  if (stack_.empty()) return;
  Level& l = stack_.back();
  if (l.object) {
    if (!l.key_given) throw std::logic_error("JsonWriter: a value inside an object needs a key first");
    l.key_given = false;
  } else {
    if (!l.empty) out_ << ',';
    l.empty = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ << '{';
  stack_.push_back({true, true, false});
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  if (stack_.empty() || !stack_.back().object || stack_.back().key_given) {
    throw std::logic_error("JsonWriter: end_object without a matching begin_object (or after a key)");
  }
  stack_.pop_back();
  out_ << '}';
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ << '[';
  stack_.push_back({false, true, false});
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  if (stack_.empty() || stack_.back().object) throw std::logic_error("JsonWriter: end_array without a begin_array");
  stack_.pop_back();
  out_ << ']';
  return *this;
}

JsonWriter& JsonWriter::key(const std::string& k) {
  if (stack_.empty() || !stack_.back().object || stack_.back().key_given) {
    throw std::logic_error("JsonWriter: key '" + k + "' outside an object, or two keys in a row");
  }
  Level& l = stack_.back();
  if (!l.empty) out_ << ',';
  l.empty = false;
  l.key_given = true;
  out_ << '"' << json_escape(k) << "\":";
  return *this;
}

JsonWriter& JsonWriter::value(const std::string& s) {
  before_value();
  out_ << '"' << json_escape(s) << '"';
  return *this;
}

JsonWriter& JsonWriter::value(const char* s) { return value(std::string(s)); }

JsonWriter& JsonWriter::value(bool b) {
  before_value();
  out_ << (b ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::value(int64_t x) {
  before_value();
  out_ << x;
  return *this;
}

JsonWriter& JsonWriter::value(uint64_t x) {
  before_value();
  out_ << x;
  return *this;
}

JsonWriter& JsonWriter::value(double x) {
  before_value();
  if (!std::isfinite(x)) {
    if (!format_.nonfinite_as_strings) {
      out_ << "null";
    } else {
      out_ << (std::isnan(x) ? "\"nan\"" : x > 0 ? "\"inf\"" : "\"-inf\"");
    }
  } else {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.*g", format_.digits, x);
    out_ << buf;
  }
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ << "null";
  return *this;
}

}  // namespace fa
