// The --speculate flag's check, shared by the tools that take it: a bad value is
// refused while parsing the command line, before any model loads.
#pragma once

#include <exception>
#include <string>

#include "cli/cli.hpp"

#include "qhexrt/session.hpp"

inline qhx_cli::Check speculate_validator() {
  return qhx_cli::Check(
      [](std::string& v) {
        try {
          qhx::parse_speculate(v);
          return std::string();
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      },
      "ngram[:K]");
}
