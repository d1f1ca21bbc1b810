#include "framework/io/atomic_file.h"

#include <cstdio>
#include <fstream>

#include "kernels/check.h"

namespace minidp {

void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp";
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MINIDP_CHECK(out, "cannot create " << tmp);
    write(out);
    out.close();
    MINIDP_CHECK(out, "writing " << tmp << " failed");
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throwError("cannot rename " + tmp + " to " + path, __FILE__, __LINE__);
  }
}

void writeFileAtomically(const std::string& path, const std::string& contents) {
  writeFileAtomically(path, [&](std::ostream& out) { out.write(contents.data(), static_cast<std::streamsize>(contents.size())); });
}

}  // namespace minidp
