#include "framework/io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/check.h"
#include "framework/io/atomic_file.h"

namespace minidp {

namespace {

constexpr const char* kMetadataKey = "__metadata__";

// Bytes per element of each dtype the safetensors specification defines.
int64_t dtypeSize(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? -1 : it->second;
}

std::string describe(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// prod(shape) * the size of `dtype` (known, dimensions non-negative); an error naming `where` when it overflows
// int64.
int64_t byteSize(const std::string& where, const std::string& dtype, const std::vector<int64_t>& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = dtypeSize(dtype);
  for (int64_t d : shape) {
    MINIDP_CHECK(n <= std::numeric_limits<int64_t>::max() / d,
                 where << ": shape " << describe(shape) << " is too large: its " << dtype << " bytes exceed 2^63 - 1");
    n *= d;
  }
  return n;
}

struct Entry {
  std::string name;
  SafeTensor tensor;  // bytes still empty
  int64_t begin, end;
};

// Parses and checks one header entry against the buffer size.
Entry parseEntry(const std::string& path, const std::string& name, const nlohmann::json& j, int64_t bufferSize) {
  const std::string where = path + ": tensor '" + name + "'";
  MINIDP_CHECK(j.is_object(), where << ": header entry is not a JSON object");
  MINIDP_CHECK(j.contains("dtype") && j["dtype"].is_string(), where << ": missing string \"dtype\"");
  MINIDP_CHECK(j.contains("shape") && j["shape"].is_array(), where << ": missing array \"shape\"");
  MINIDP_CHECK(j.contains("data_offsets") && j["data_offsets"].is_array() && j["data_offsets"].size() == 2,
               where << ": missing \"data_offsets\" [begin, end]");
  Entry e;
  e.name = name;
  e.tensor.dtype = j["dtype"].get<std::string>();
  const int64_t elementSize = dtypeSize(e.tensor.dtype);
  MINIDP_CHECK(elementSize > 0, where << ": unknown dtype \"" << e.tensor.dtype << "\"");
  for (const auto& d : j["shape"]) {
    MINIDP_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
                 where << ": shape entries must be non-negative integers, got " << d.dump());
    e.tensor.shape.push_back(d.get<int64_t>());
  }
  for (const auto& o : j["data_offsets"]) {
    MINIDP_CHECK(o.is_number_unsigned(), where << ": data_offsets must be non-negative integers, got " << o.dump());
  }
  const uint64_t begin = j["data_offsets"][0].get<uint64_t>(), end = j["data_offsets"][1].get<uint64_t>();
  MINIDP_CHECK(begin <= end && end <= uint64_t(bufferSize), where << ": data_offsets [" << begin << ", " << end
                                                                  << "] lie outside the " << bufferSize
                                                                  << "-byte buffer");
  e.begin = static_cast<int64_t>(begin);
  e.end = static_cast<int64_t>(end);
  const int64_t expected = byteSize(where, e.tensor.dtype, e.tensor.shape);
  MINIDP_CHECK(expected == e.end - e.begin, where << ": data_offsets span " << e.end - e.begin << " bytes, but "
                                                  << e.tensor.dtype << " " << describe(e.tensor.shape) << " needs "
                                                  << expected);
  return e;
}

}  // namespace

const SafeTensor& SafeTensorFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  std::string names;
  for (const auto& entry : tensors) names += (names.empty() ? "" : ", ") + entry.first;
  throwError("no tensor '" + name + "' among {" + names + "}", __FILE__, __LINE__);
}

SafeTensorFile readSafetensors(const std::string& path, const SafeTensorFilter& filter) {
  MINIDP_CHECK(std::filesystem::is_regular_file(path), "safetensors file " << path << " does not exist");
  const int64_t fileSize = static_cast<int64_t>(std::filesystem::file_size(path));
  std::ifstream in(path, std::ios::binary);
  MINIDP_CHECK(in, "cannot open " << path);
  MINIDP_CHECK(fileSize >= 8, path << ": file holds " << fileSize << " bytes, too short for the 8-byte header length");

  uint8_t lenBytes[8];
  in.read(reinterpret_cast<char*>(lenBytes), 8);
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i) headerLen = headerLen << 8 | lenBytes[i];
  MINIDP_CHECK(headerLen <= uint64_t(fileSize - 8),
               path << ": header length " << headerLen << " runs past the end of the " << fileSize << "-byte file");
  MINIDP_CHECK(headerLen <= kMaxSafetensorsHeader, path << ": header length " << headerLen << " exceeds the format's "
                                                        << kMaxSafetensorsHeader << "-byte limit");
  std::string headerText(headerLen, '\0');
  in.read(headerText.data(), static_cast<std::streamsize>(headerLen));
  MINIDP_CHECK(in, path << ": cannot read the " << headerLen << "-byte header");

  // nlohmann keeps the last of duplicate keys silently, so the parser callback records top-level keys.
  std::set<std::string> seen;
  std::string duplicate;
  auto onEvent = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(headerText, onEvent);
  } catch (const nlohmann::json::parse_error& e) {
    // The parser's own text ("[json.exception.parse_error.101] ...") is the library's, not the user's.
    throwError(path + ": header is not valid JSON (at byte " + std::to_string(e.byte) + " of " +
                   std::to_string(headerLen) + ")",
               __FILE__, __LINE__);
  }
  MINIDP_CHECK(header.is_object(), path << ": header is not a JSON object but " << header.type_name());
  MINIDP_CHECK(duplicate.empty(), path << ": tensor '" << duplicate << "' appears twice in the header");

  const int64_t bufferSize = fileSize - 8 - static_cast<int64_t>(headerLen);
  SafeTensorFile file;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      MINIDP_CHECK(value.is_object(), path << ": " << kMetadataKey << " is not a JSON object");
      for (const auto& [k, v] : value.items()) {
        MINIDP_CHECK(v.is_string(), path << ": metadata '" << k << "' is not a string");
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parseEntry(path, key, value, bufferSize));
  }

  // As the reference implementation requires: tensors tile the buffer without gaps or overlaps.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  int64_t next = 0;
  for (const auto& e : entries) {
    MINIDP_CHECK(e.begin == next, path << ": tensor '" << e.name << "' starts at byte " << e.begin
                                       << " of the buffer, expected " << next << " (gap or overlap)");
    next = e.end;
  }
  MINIDP_CHECK(next == bufferSize,
               path << ": tensors cover " << next << " bytes but the buffer after the header holds " << bufferSize);

  std::vector<bool> wanted(entries.size(), true);
  for (size_t i = 0; i < entries.size() && filter; ++i) wanted[i] = filter(entries[i].name, entries[i].tensor);
  const int64_t bufferStart = 8 + static_cast<int64_t>(headerLen);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!wanted[i]) continue;
    Entry& e = entries[i];
    e.tensor.bytes.resize(e.end - e.begin);
    in.seekg(bufferStart + e.begin);
    in.read(reinterpret_cast<char*>(e.tensor.bytes.data()), e.end - e.begin);
    MINIDP_CHECK(in, path << ": cannot read the bytes of tensor '" << e.name << "'");
    file.tensors.emplace_back(std::move(e.name), std::move(e.tensor));
  }
  return file;
}

SafeTensorFile readSafetensorsHeader(const std::string& path) {
  return readSafetensors(path, [](const std::string&, const SafeTensor&) { return false; });
}

void writeSafetensors(const std::string& path, const std::vector<std::pair<std::string, SafeTensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // nlohmann::json objects are std::maps: keys come out sorted, so the header is deterministic.
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const std::string where = path + ": tensor '" + name + "'";
    MINIDP_CHECK(name != kMetadataKey, where << ": the name is reserved for metadata");
    MINIDP_CHECK(!header.contains(name), where << " is given twice");
    const int64_t elementSize = dtypeSize(t.dtype);
    MINIDP_CHECK(elementSize > 0, where << ": unknown dtype \"" << t.dtype << "\"");
    for (int64_t d : t.shape) MINIDP_CHECK(d >= 0, where << ": negative dimension in shape " << describe(t.shape));
    const int64_t expected = byteSize(where, t.dtype, t.shape);
    MINIDP_CHECK(expected == static_cast<int64_t>(t.bytes.size()), where << ": " << t.dtype << " " << describe(t.shape)
                                                                         << " needs " << expected << " bytes, got "
                                                                         << t.bytes.size());
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + expected}}};
    offset += expected;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string headerText = header.dump();
  headerText.resize((headerText.size() + 7) / 8 * 8, ' ');  // keeps the buffer 8-byte aligned

  writeFileAtomically(path, [&](std::ostream& out) {
    uint8_t lenBytes[8];
    for (int i = 0; i < 8; ++i) lenBytes[i] = static_cast<uint8_t>(uint64_t(headerText.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(lenBytes), 8);
    out.write(headerText.data(), static_cast<std::streamsize>(headerText.size()));
    for (const auto& entry : tensors) {
      out.write(reinterpret_cast<const char*>(entry.second.bytes.data()),
                static_cast<std::streamsize>(entry.second.bytes.size()));
    }
  });
}

}  // namespace minidp
