package wire

// NodeRef names a node a job must be on.
type NodeRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// JobPlan is one job as its shard's nodes must have it, with the nodes of
// the shard. The core's store produces it and the core's workflows consume
// it (never a node): it lives here so that the workflows, which the node
// agent links too, need not import the store and with it the database
// driver.
type JobPlan struct {
	// Exists is false for a job that is gone; nothing else is set then.
	Exists bool `json:"exists"`
	// Deleting: the units must go from every node, then the row.
	Deleting bool      `json:"deleting"`
	Version  int64     `json:"version"`
	Job      Job       `json:"job"`
	Nodes    []NodeRef `json:"nodes"`
}
