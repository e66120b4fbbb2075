// Package healthcel is a NodeConfig's CEL health gate: an expression over
// the Node that must be true through the soak. The reconciler compiles it
// before any trial starts (one that does not compile holds the rollout);
// each node evaluates it against its own Node.
package healthcel

import (
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/runtime"
)

// costLimit bounds one evaluation, so no expression ties up the agent.
const costLimit = 1_000_000

// nodeEnv is the environment every gate compiles in, built once: it is
// the costly part of a compile, and the same for all.
var nodeEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(cel.Variable("node", cel.DynType), ext.Strings(), ext.Lists(), ext.Sets())
})

// Program is a compiled gate.
type Program struct {
	expr string
	prg  cel.Program
}

// Compile checks expr and readies it; the error says why it cannot be
// a gate (it does not parse, or is not a bool).
func Compile(expr string) (*Program, error) {
	env, err := nodeEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("does not compile: %w", iss.Err())
	}
	if !ast.OutputType().IsExactType(cel.BoolType) && !ast.OutputType().IsExactType(cel.DynType) {
		return nil, fmt.Errorf("is of type %s; a gate is a bool", ast.OutputType())
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, err
	}
	return &Program{expr: expr, prg: prg}, nil
}

// Holds evaluates the gate against node (any API object the default
// converter takes): true when it holds; an error when it cannot say (a
// field it reads is absent, it runs too long, it is not a bool).
func (p *Program) Holds(node any) (bool, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(node)
	if err != nil {
		return false, err
	}
	out, _, err := p.prg.Eval(map[string]any{"node": obj})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("evaluates to %v, not a bool", out.Value())
	}
	return b, nil
}

// String is the expression.
func (p *Program) String() string { return p.expr }
