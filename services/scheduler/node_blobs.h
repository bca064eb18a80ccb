/* node_blobs.h: which store file a node's blob_get may read. A node is
 * served every blob a model placed on it names (the GGUF, each LoRA
 * adapter, the vision projector), and nothing else. */
#ifndef SCH_NODE_BLOBS_H
#define SCH_NODE_BLOBS_H

#include "lib/prelude.h"
#include "proto/msg.h"

/* The path among r's model_path, adapters and projector whose file name is
 * digest and which is readable here; NULL if none (an adopted runner's
 * paths name the node's copies: not files on this host). */
const char *sch_node_blob_path(const msg_resolved_body_t *r,
                               const char *digest);

#endif
