#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "formats/durable_file.h"
#include "formats/half.h"
#include "formats/mapped_file.h"
#include "nlohmann/json.hpp"

namespace fsdpd {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

// The Python package refuses headers above 100 MB; so do we, before allocating anything.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// No real tensor comes close; the bound keeps shape products far from overflowing.
constexpr uint64_t kMaxElements = uint64_t{1} << 48;

struct DtypeInfo {
  const char* name;
  size_t bytes;
};

constexpr DtypeInfo kDtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                 {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};

const DtypeInfo* FindDtype(const std::string& name) {
  for (const DtypeInfo& dtype : kDtypes) {
    if (name == dtype.name) return &dtype;
  }
  return nullptr;
}

template <typename T>
T LoadUnaligned(const uint8_t* data) {
  T value;
  std::memcpy(&value, data, sizeof(T));
  return value;
}

void ConvertToFloat(const std::string& dtype, const uint8_t* data, size_t count, float* out) {
  // An empty tensor has no storage: memcpy must not see its null pointer, even for 0 bytes.
  if (count == 0) return;
  if (dtype == "F32") {
    std::memcpy(out, data, count * sizeof(float));
  } else if (dtype == "BF16") {
    for (size_t i = 0; i < count; ++i) {
      const uint32_t bits = static_cast<uint32_t>(LoadUnaligned<uint16_t>(data + 2 * i)) << 16;
      std::memcpy(&out[i], &bits, sizeof(float));
    }
  } else if (dtype == "F16") {
    for (size_t i = 0; i < count; ++i) out[i] = HalfToFloat(LoadUnaligned<uint16_t>(data + 2 * i));
  } else if (dtype == "F64") {
    for (size_t i = 0; i < count; ++i)
      out[i] = static_cast<float>(LoadUnaligned<double>(data + 8 * i));
  } else if (dtype == "I64") {
    for (size_t i = 0; i < count; ++i)
      out[i] = static_cast<float>(LoadUnaligned<int64_t>(data + 8 * i));
  } else if (dtype == "I32") {
    for (size_t i = 0; i < count; ++i)
      out[i] = static_cast<float>(LoadUnaligned<int32_t>(data + 4 * i));
  } else if (dtype == "I16") {
    for (size_t i = 0; i < count; ++i)
      out[i] = static_cast<float>(LoadUnaligned<int16_t>(data + 2 * i));
  } else if (dtype == "I8") {
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(static_cast<int8_t>(data[i]));
  } else {  // U8, BOOL
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(data[i]);
  }
}

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

absl::Status HeaderError(const std::string& source, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors '", source, "': ", message));
}

absl::StatusOr<Entry> ParseEntry(const std::string& source, const std::string& name,
                                 const nlohmann::json& value, uint64_t data_size) {
  Entry entry;
  entry.name = name;
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!value.is_object()) return HeaderError(source, where + " is not a JSON object");
  for (const auto& item : value.items()) {
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets") {
      return HeaderError(source, absl::StrCat(where, " has unknown field '", item.key(), "'"));
    }
  }
  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    return HeaderError(source, where + " has no string 'dtype'");
  }
  entry.dtype = dtype->get<std::string>();
  const DtypeInfo* info = FindDtype(entry.dtype);
  if (info == nullptr) {
    return HeaderError(source, absl::StrCat(where, " has unsupported dtype '", entry.dtype,
                                            "' (supported: F32, F16, BF16, F64, I64, I32, I16, "
                                            "I8, U8, BOOL)"));
  }
  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) {
    return HeaderError(source, where + " has no 'shape' array");
  }
  uint64_t elements = 1;
  for (const auto& dimension : *shape) {
    if (!dimension.is_number_unsigned()) {
      // Only scalars are printed: dumping an arbitrarily nested value would recurse.
      const std::string shown = dimension.is_primitive() ? dimension.dump() : dimension.type_name();
      return HeaderError(source, absl::StrCat(where,
                                              " has a shape entry that is not a "
                                              "non-negative integer: ",
                                              shown));
    }
    const uint64_t size = dimension.get<uint64_t>();
    if (size > kMaxElements || (size != 0 && elements > kMaxElements / size)) {
      return HeaderError(source,
                         absl::StrCat(where, " has an impossibly large shape ", shape->dump()));
    }
    elements *= size;
    entry.shape.push_back(static_cast<int64_t>(size));
  }
  auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return HeaderError(source, where + " needs 'data_offsets' as two non-negative integers");
  }
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  if (entry.begin > entry.end || entry.end > data_size) {
    return HeaderError(source,
                       absl::StrCat(where, " has data_offsets [", entry.begin, ", ", entry.end,
                                    "] outside the data section of ", data_size, " bytes"));
  }
  const uint64_t expected = elements * info->bytes;
  if (entry.end - entry.begin != expected) {
    return HeaderError(source,
                       absl::StrCat(where, " spans ", entry.end - entry.begin, " bytes but shape ",
                                    shape->dump(), " of ", entry.dtype, " needs ", expected));
  }
  return entry;
}

absl::StatusOr<std::vector<Entry>> ParseHeader(const std::string& source, std::string_view header,
                                               uint64_t data_size,
                                               std::map<std::string, std::string>* metadata_out) {
  nlohmann::json root = nlohmann::json::parse(header.begin(), header.end(), nullptr,
                                              /*allow_exceptions=*/false);
  if (root.is_discarded()) return HeaderError(source, "header is not valid JSON");
  if (!root.is_object()) return HeaderError(source, "header is not a JSON object");
  std::vector<Entry> entries;
  for (const auto& item : root.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) {
        return HeaderError(source, "__metadata__ is not a JSON object");
      }
      for (const auto& metadata : item.value().items()) {
        if (!metadata.value().is_string()) {
          return HeaderError(
              source, absl::StrCat("__metadata__ value of '", metadata.key(), "' is not a string"));
        }
        if (metadata_out != nullptr) {
          (*metadata_out)[metadata.key()] = metadata.value().get<std::string>();
        }
      }
      continue;
    }
    auto entry = ParseEntry(source, item.key(), item.value(), data_size);
    if (!entry.ok()) return entry.status();
    entries.push_back(std::move(*entry));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    if (entry.begin == entry.end) continue;  // empty tensors occupy no bytes
    if (previous != nullptr && entry.begin < previous->end) {
      return HeaderError(source, absl::StrCat("tensors '", previous->name, "' and '", entry.name,
                                              "' overlap (bytes ", entry.begin, " to ",
                                              std::min(entry.end, previous->end), ")"));
    }
    previous = &entry;
  }
  return entries;
}

struct TensorRef {
  const std::string* name;
  const std::vector<int64_t>* shape;
  const float* values;
  size_t count;
};

absl::Status WriteTensors(const std::string& path, const std::vector<TensorRef>& tensors,
                          const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorRef& tensor : tensors) {
    if (tensor.name->empty() || *tensor.name == "__metadata__") {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write '", path, "': invalid tensor name '", *tensor.name, "'"));
    }
    if (!names.insert(*tensor.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write '", path, "': tensor '", *tensor.name, "' appears twice"));
    }
    uint64_t elements = 1;
    for (int64_t dimension : *tensor.shape) {
      if (dimension < 0) {
        return absl::InvalidArgumentError(absl::StrCat("cannot write '", path, "': tensor '",
                                                       *tensor.name, "' has a negative dimension"));
      }
      elements *= static_cast<uint64_t>(dimension);
    }
    if (elements != tensor.count || (elements > 0 && tensor.values == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot write '", path, "': tensor '",
                                                     *tensor.name, "' has ", tensor.count,
                                                     " values but its shape holds ", elements));
    }
    header[*tensor.name] = {{"dtype", "F32"},
                            {"shape", *tensor.shape},
                            {"data_offsets", {offset, offset + elements * sizeof(float)}}};
    offset += elements * sizeof(float);
  }
  std::string header_text = header.dump();
  // The Python writer pads with spaces so the data starts 8-byte aligned; so do we.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const uint64_t header_length = header_text.size();
  DurableFileWriter writer;
  if (auto status = writer.Open(path); !status.ok()) return status;
  if (auto status = writer.Append(&header_length, sizeof(header_length)); !status.ok()) {
    return status;
  }
  if (auto status = writer.Append(header_text); !status.ok()) return status;
  for (const TensorRef& tensor : tensors) {
    if (auto status = writer.Append(tensor.values, tensor.count * sizeof(float)); !status.ok()) {
      return status;
    }
  }
  return writer.Commit();
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<TensorRef> references;
  references.reserve(tensors.size());
  for (const NamedTensor& tensor : tensors) {
    references.push_back({&tensor.name, &tensor.shape, tensor.values.data(), tensor.values.size()});
  }
  return WriteTensors(path, references, metadata);
}

absl::Status WriteSafetensorsViews(const std::string& path, const std::vector<TensorView>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  std::vector<TensorRef> references;
  references.reserve(tensors.size());
  for (const TensorView& tensor : tensors) {
    uint64_t elements = 1;
    for (int64_t dimension : tensor.shape)
      elements *= static_cast<uint64_t>(std::max<int64_t>(dimension, 0));
    references.push_back({&tensor.name, &tensor.shape, tensor.values, elements});
  }
  return WriteTensors(path, references, metadata);
}

absl::StatusOr<std::vector<NamedTensor>> ParseSafetensors(
    std::string_view bytes, const std::string& source,
    std::map<std::string, std::string>* metadata) {
  if (metadata != nullptr) metadata->clear();
  if (bytes.size() < 8) {
    return HeaderError(source, absl::StrCat("file of ", bytes.size(),
                                            " bytes is too short for the 8-byte header length"));
  }
  const uint64_t header_length =
      LoadUnaligned<uint64_t>(reinterpret_cast<const uint8_t*>(bytes.data()));
  if (header_length > bytes.size() - 8) {
    return HeaderError(
        source, absl::StrCat("header length ", header_length, " runs past the end of the file (",
                             bytes.size(), " bytes)"));
  }
  if (header_length > kMaxHeaderBytes) {
    return HeaderError(source,
                       absl::StrCat("header length ", header_length, " exceeds the 100 MB limit"));
  }
  const std::string_view header = bytes.substr(8, header_length);
  const uint64_t data_size = bytes.size() - 8 - header_length;
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data()) + 8 + header_length;
  absl::StatusOr<std::vector<Entry>> entries;
  try {
    entries = ParseHeader(source, header, data_size, metadata);
  } catch (const nlohmann::json::exception& error) {
    // Every access above is type-checked first; this is a last line of defence for the fuzzer.
    return HeaderError(source, absl::StrCat("malformed header: ", error.what()));
  }
  if (!entries.ok()) return entries.status();
  std::vector<NamedTensor> tensors;
  tensors.reserve(entries->size());
  for (const Entry& entry : *entries) {
    NamedTensor tensor;
    tensor.name = entry.name;
    tensor.shape = entry.shape;
    const size_t count = (entry.end - entry.begin) / FindDtype(entry.dtype)->bytes;
    tensor.values.resize(count);
    ConvertToFloat(entry.dtype, data + entry.begin, count, tensor.values.data());
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

absl::StatusOr<std::vector<NamedTensor>> ReadSafetensors(
    const std::string& path, std::map<std::string, std::string>* metadata) {
  auto file = MappedFile::Open(path, "safetensors file");
  if (!file.ok()) return file.status();
  return ParseSafetensors(
      std::string_view(reinterpret_cast<const char*>((*file)->data()), (*file)->size()), path,
      metadata);
}

}  // namespace fsdpd
