// TOSCA.meta and manifest (.mf) readers, and the digest checks of the files they list.
#pragma once

#include <string>
#include <string_view>

#include "base/base.h"
#include "tosca/internal/source.h"
#include "tosca/tosca.h"

namespace tosca::internal {

// TOSCA-Simple-Profile-YAML-v1.2 §3.10.4 / ETSI GS NFV-SOL 004 v2.6.1 §4.2: blocks of
// "Key: value" lines separated by blank lines; the first block describes the CSAR, each
// later block one file (Name, Content-Type, and SOL004's Algorithm / Hash).
ToscaMeta parse_tosca_meta(std::string_view text, const std::string& display,
                           base::Diagnostics& diags);

// ETSI GS NFV-SOL 004 v2.6.1 §4.3.2: a "metadata:" block, then Source / Algorithm / Hash
// entries, optionally non_mano_artifact_sets and a CMS signature block.
Manifest parse_manifest(std::string_view text, const std::string& display,
                        base::Diagnostics& diags);

// Checks that every listed file exists and, when it carries Algorithm and Hash, that the
// digest matches. `what` names the listing in messages ("TOSCA.meta", "manifest").
void verify_listed_files(FileSource& src, const std::vector<MetaFileEntry>& entries,
                         std::string_view what, bool verify_digests, base::Diagnostics& diags);

}  // namespace tosca::internal
