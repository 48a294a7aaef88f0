package kubeapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// NodeCondition keeps one condition of a Node, as node-problem-detector
// does: kubectl describe node shows it. Its transition time moves only when
// its status changes.
type NodeCondition struct {
	API  *Client
	Node string
	Type string

	last       string // the status last set
	transition time.Time
}

type condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
	LastHeartbeatTime  string `json:"lastHeartbeatTime"`
	LastTransitionTime string `json:"lastTransitionTime"`
}

// Set publishes the condition, its status True, False or Unknown: a
// strategic merge of the node's status conditions, keyed by type, so that
// the kubelet's and others' stay.
func (c *NodeCondition) Set(ctx context.Context, status, reason, message string) error {
	now := time.Now().UTC()
	if c.last != status {
		c.transition = now
	}
	patch := map[string]any{"status": map[string]any{"conditions": []condition{{Type: c.Type, Status: status, Reason: reason, Message: message,
		LastHeartbeatTime: now.Format(time.RFC3339), LastTransitionTime: c.transition.Format(time.RFC3339)}}}}
	if err := c.API.Do(ctx, http.MethodPatch, "/api/v1/nodes/"+url.PathEscape(c.Node)+"/status", "application/strategic-merge-patch+json", patch, nil); err != nil {
		return fmt.Errorf("set the condition %s of node %s: %w", c.Type, c.Node, err)
	}
	c.last = status
	return nil
}
